// Package redisx is the plumbing the redis and redlock backends share:
// what a go-redis error means (reply classes, whether a request can have
// reached the server), the parts of a URL both read the same way, and the
// read loop of a pub/sub connection. Each backend keeps its own policy
// (which sentinel an error maps to, what a broken subscription wakes); the
// facts about Redis live here once.
package redisx

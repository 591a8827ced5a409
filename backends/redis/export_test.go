package redis

import (
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
)

// Test hooks for the external test package.

// KeySlot is the Redis Cluster hash slot the backend computes for key.
var KeySlot = keySlot

// FenceKey is the fence key of the lock key lock.
func FenceKey(lock string) string { return keysFor(lock).fence }

// NewDriver returns the bare driver over c (not owning it), for benchmarks
// that separate the driver's cost from the portable layer's.
func NewDriver(c goredis.UniversalClient) driver.Backend { return newBackend(c, false) }

// QueueKey is the waiter line (a list) of the lock key lock.
func QueueKey(lock string) string { return keysFor(lock).queue }

// WaitKey is the liveness key of a waiter queued under token on lock.
func WaitKey(lock, token string) string { return keysFor(lock).wait(token) }

// ReleaseChannel is the release channel of the lock key lock.
func ReleaseChannel(lock string) string { return keysFor(lock).channel }

// SetLaneClient makes d's lane use c (one pointing at a port nobody
// listens on: the lane cannot connect, and its waits fall back to the hub).
func SetLaneClient(d driver.Backend, c goredis.UniversalClient) { d.(*backend).lane.client = c }

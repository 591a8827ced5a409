package etcd

// ExampleEndpoints returns the client endpoints of the test etcd server
// the examples run against.
var ExampleEndpoints = exampleEndpoints

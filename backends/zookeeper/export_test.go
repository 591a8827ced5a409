package zookeeper

// ExampleServers returns the client addresses of the test server the
// examples run against; the external test package sets it.
var ExampleServers func() []string

// Escape and SeqOf expose the node naming to the tests.
var (
	Escape = escape
	SeqOf  = seqOf
)

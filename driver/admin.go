package driver

import "context"

// Admin is implemented by a Backend that can act on its store out of band,
// with the store's own administrative operations, the way an operator or a
// fault would. The conformance suite's URL harness uses it, so that
// `fencelock conformance --url` runs the loss checks against a deployed
// store with nothing skipped. Client.As does not hand it out: the suite
// reaches it through internal/adminhook, which only this module imports.
type Admin interface {
	// Expire makes the store drop the lock whose store key is name at once,
	// as if its TTL had passed (for example DEL, a lease revoke, a
	// terminated backend); the holder is not told. It returns nil if the
	// lock was not held.
	Expire(ctx context.Context, name string) error

	// KillSessions cuts, on the server side, every session and connection
	// this backend holds locks through (CLIENT KILL, lease revoke,
	// pg_terminate_backend, session close), as a network fault or a server
	// restart would, so that the store drops the leases held through it
	// (now, or when their TTL runs out unrenewed). The backend may reconnect
	// afterwards for new requests.
	KillSessions(ctx context.Context) error
}

// The optional admin hooks below sit beside Admin on a Backend (the
// conformance suite type-asserts the driver.Admin it gets).
// Each lets the suite reach a class of defect that a healthy store never
// shows: state the store can lose, nodes that drift apart, a waiter queue,
// unrelated load. A backend implements the ones that fit what it
// declares in Capabilities; the suite says which a declaration needs.

// FenceAdmin is implemented by a Backend whose fences are kept per name in
// a record or key of the store (Redis's fence key, a DynamoDB item's fence
// attribute, the counters on Redlock's primaries), as opposed to a
// store-wide counter (a Raft revision, a zxid, a transaction ID).
type FenceAdmin interface {
	// StoredFence returns the fence state the store keeps for the lock
	// whose store key is name: the value the next grant's fence must
	// exceed (on a quorum of nodes, the largest value that a majority of
	// them hold at least). ok is false if the store keeps nothing for name.
	StoredFence(ctx context.Context, name string) (fence Fence, ok bool, err error)
	// DropFenceState deletes what the store keeps of name's fence, as a
	// restart without persistence, a failover to a replica that missed it,
	// or another client deleting the record would. The lock must be free.
	DropFenceState(ctx context.Context, name string) error
}

// QuorumAdmin is implemented by a Backend whose client keeps each lock on
// several independent nodes itself (Redlock), in the order the URL lists
// their addresses.
type QuorumAdmin interface {
	// Nodes is the number of nodes.
	Nodes() int
	// RaiseFence raises the fence state of the lock with store key name on
	// node i alone by by, so that the nodes diverge as they do after
	// grants that reached different majorities.
	RaiseFence(ctx context.Context, name string, node int, by uint64) error
}

// QueueAdmin is implemented by a Backend whose store queues waiters
// (Capabilities.FIFO), so that the suite can wait for a signal that a
// waiter is queued instead of sleeping.
type QueueAdmin interface {
	// Waiters returns how many Acquires are queued, not granted, for the
	// lock with store key name.
	Waiters(ctx context.Context, name string) (int, error)
}

// LoadAdmin is implemented by a Backend whose store has long-lived
// activity unrelated to locks that a fence source could wrongly depend on
// (on PostgreSQL, a write transaction left open in another session holds
// back the snapshot horizon).
type LoadAdmin interface {
	// Busy starts that activity; stop ends it.
	Busy(ctx context.Context) (stop func(), err error)
}

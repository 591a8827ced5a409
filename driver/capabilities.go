package driver

import "time"

// FenceGuarantee says how strongly a backend keeps the fence promise.
type FenceGuarantee int

// Every backend fences (Lease.Fence is never 0); the zero FenceGuarantee
// is no declaration, which the conformance suite refuses.
const (
	// FenceBestEffort: fences increase while the store keeps its data; a
	// failover or restart can repeat or lower them.
	FenceBestEffort FenceGuarantee = iota + 1
	// FenceTimeFloored: fences are floored by the store's clock, so they keep
	// increasing across data loss as long as the store's clock does not go
	// backwards by more than the outage lasted.
	FenceTimeFloored
	// FenceStrict: fences increase across release, expiry, client crash,
	// server restart and failover (consensus-backed or single durable store).
	FenceStrict
)

func (g FenceGuarantee) String() string {
	switch g {
	case FenceBestEffort:
		return "best-effort"
	case FenceTimeFloored:
		return "time-floored"
	case FenceStrict:
		return "strict"
	}
	return "unknown"
}

// TimeAuthority says whose clock decides that a lease expired.
type TimeAuthority int

const (
	// TimeServer: the store's clock expires leases (Redis PX, etcd leases).
	TimeServer TimeAuthority = iota
	// TimeClient: clients decide from their own observations (DynamoDB lock
	// client style: a record unchanged for a lease duration is stale).
	TimeClient
	// TimeProcess: the lock lives in one process and its clock.
	TimeProcess
)

func (a TimeAuthority) String() string {
	switch a {
	case TimeServer:
		return "server clock"
	case TimeClient:
		return "client observation"
	case TimeProcess:
		return "process clock"
	}
	return "unknown"
}

// WaitMechanism says how a blocked Acquire learns that the lock is free.
type WaitMechanism int

const (
	// WaitPoll: jittered backoff polling.
	WaitPoll WaitMechanism = iota
	// WaitNotify: a notification (pub/sub, watch) with polling as a fallback.
	WaitNotify
	// WaitQueue: the store queues waiters and grants in order.
	WaitQueue
)

func (m WaitMechanism) String() string {
	switch m {
	case WaitPoll:
		return "poll"
	case WaitNotify:
		return "notify"
	case WaitQueue:
		return "server queue"
	}
	return "unknown"
}

// NodeLoss says what happens to held locks when a store node is lost.
type NodeLoss int

const (
	// NodeLossNotApplicable: a single process; nothing to lose.
	NodeLossNotApplicable NodeLoss = iota
	// NodeLossUnsafe: losing the node loses the locks (or an async replica can
	// grant a held lock again).
	NodeLossUnsafe
	// NodeLossQuorum: survives the loss of a minority of nodes.
	NodeLossQuorum
)

func (n NodeLoss) String() string {
	switch n {
	case NodeLossNotApplicable:
		return "n/a (single process)"
	case NodeLossUnsafe:
		return "no"
	case NodeLossQuorum:
		return "yes (quorum)"
	}
	return "unknown"
}

// Capabilities describes a backend. It drives the conformance suite (which
// checks what is declared) and docs/comparison.md.
type Capabilities struct {
	// Backend is the backend's short name ("mem", "redis", ...).
	Backend string
	// Fence is the strength of the fence promise.
	Fence FenceGuarantee
	// FenceSource says where fences come from, for humans.
	FenceSource string
	// MinTTL is the shortest TTL the store can honour.
	MinTTL time.Duration
	// ExtendHoldBound: an Extend to a TTL longer than the one the lease
	// was granted with does not lengthen how long the store certainly
	// keeps the lock without hearing from the holder (the Lease is a
	// HoldBounder: a ZooKeeper node lives one session timeout past the
	// holder's last request, and a session's timeout is fixed when it
	// connects). ValidUntil then moves to at most the send time plus that
	// bound, and auto-renew keeps the lease at a third of it.
	ExtendHoldBound bool
	// TTLGranularity is the unit the store rounds TTLs up to (1 ms for
	// Redis PX, 1 s for etcd leases).
	TTLGranularity time.Duration
	// TimeAuthority is whose clock expires leases.
	TimeAuthority TimeAuthority
	// Wait is how a blocked Acquire learns the lock is free.
	Wait WaitMechanism
	// FIFO reports whether waiters are granted in arrival order.
	FIFO bool
	// NodeLoss is what losing a store node does to held locks.
	NodeLoss NodeLoss

	// The timing promises below are bounds the conformance suite holds
	// the backend to, by URL too, with a tolerance for a loaded machine
	// (see the conformance package). A zero value promises nothing.

	// LossSignal bounds how soon a held lease ends after the store dropped
	// it (an operator's delete, Admin.Expire, a session the store ended)
	// when nothing renews it: its LossNotifier fires within LossSignal.
	// Zero: the store does not tell, and the loss is found by the next
	// renewal, Extend or Release, or at ValidUntil.
	LossSignal time.Duration
	// ReleaseWake bounds how soon after a Release a waiter blocked in
	// Acquire on another Client is granted, however long that Client's
	// Options.Backoff: the store notifies waiters or queues them. Zero:
	// waiters poll, and find the lock free at their next attempt.
	ReleaseWake time.Duration
	// ExpiryWake bounds how soon a waiter blocked in Acquire is granted
	// after an abandoned lock's TTL ran out in the store (its holder
	// stopped renewing: a stall, a crash, a partition), counted from the
	// holder's last successful acquire or renewal plus Lease.StoreTTL,
	// however many times the waiter waited before and however long its
	// Client's Options.Backoff. Zero: no bound beyond the waiter's own
	// polling.
	ExpiryWake time.Duration
	// BreakOverlap bounds how long the holder of a lease may still believe
	// it holds the lock (no Err, before its ValidUntil) after the store
	// granted the lock to another because the holder's connection broke.
	// A store that ties a lock to a session and ends the session the
	// moment the server sees its connection close (PostgreSQL) frees the
	// lock before the holder can know; the holder learns of it within
	// BreakOverlap. Fences still rise, so a resource that checks them
	// (package guard) refuses the old holder's writes; unfenced work
	// done in that window can collide. Zero, the contract's promise:
	// never — a lease ends, from its holder's point of view, before the
	// store can grant the lock to anyone else, however the connection
	// fails.
	BreakOverlap time.Duration

	// Inspect says what Client.Inspect can report of a lock (holder's
	// label, fence, remaining TTL, queued waiters). Zero: nothing.
	Inspect InspectCaps
}

// Package fencelock gives every distributed-lock store one contract: a
// lease with a fencing token.
//
// A lock is a lease with a timer, and the timer does not care whether you
// are done. A worker that stalls past its TTL (GC, CPU throttling, a network
// call with no timeout, a frozen VM) keeps working while a second worker
// holds the lock, and its stale write erases the other's work. The fix is a
// fencing token: a number that grows with every grant, which the resource
// checks so that it refuses a write carrying an older one. fencelock issues
// one with every lease, on every backend, and package guard makes resources
// check it.
//
//	c, err := fencelock.Open(ctx, "redis://127.0.0.1:6379/0") // or mem://, etcd://, postgres://
//	l, err := c.Acquire(ctx, "nightly-report", nil)
//	defer l.Release(ctx)
//	// do the work with l.Context(); send l.Fence() with every write
//
// # Choosing a backend
//
// Each backend declares its Capabilities: where fences come from and how
// strong the promise is (FenceStrict survives failover; FenceTimeFloored and
// FenceBestEffort can repeat after data loss), whose clock expires leases,
// how waiters wake (poll, notify, server queue), FIFO fairness, and what a
// lost node does. The conformance suite checks what is declared and
// docs/comparison.md compares the backends with measured numbers.
// backends/memory (mem://) is an in-process reference backend for tests.
//
// # URLs
//
// Open picks the backend by URL scheme from the backends the program
// imports (a blank import registers a backend's schemes). The query
// parameters prefix, ttl and wait set Options.Prefix, DefaultTTL and
// DefaultWait on every backend; other parameters are the backend's, and
// unknown ones are rejected with ErrInvalid. Swapping stores is a
// configuration change.
//
// # Fencing
//
// Lease.Fence is greater than the fence of every earlier lease on the same
// name. It fits in an int64. A fence protects data only if the resource
// checks it: claim-first (stamp the fence on the record before reading,
// write only while the stamp is yours) loses nothing; see package guard.
//
// # Lease loss
//
// A lease renews itself at TTL/3 (AcquireOptions.AutoRenew, default on). Its
// ValidUntil is a conservative local deadline: the start of the granting
// request plus TTL minus a drift margin, moved only by successful renewals
// measured from when they were sent. When it passes without renewal, when
// the store reports the lease gone, or when MaxHold passes, the lease ends:
// Done is closed, Err returns an error wrapping ErrLeaseLost, and Context is
// cancelled with that cause, before the store can grant the lock to anyone
// else (under bounded clock-rate drift). One store breaks that order, and
// declares by how much in Capabilities.BreakOverlap: PostgreSQL frees a lock
// the moment it sees its holder's connection break, before the holder can
// know (the holder learns within 50 ms). Pass Context to the work; but only
// the fence protects against a worker that is paused and cannot look, or
// that has not yet learned its connection broke.
//
// Release runs on a context detached from the caller's (bounded by
// Options.ReleaseTimeout), is idempotent, never removes another holder's
// lock, and returns ErrLeaseLost if the lease had already been lost. No
// renewal is sent after Release.
//
// # Observability
//
// Options.Logger receives lease-lost and renewal-failure events.
// Options.MeterProvider (default: the global OpenTelemetry provider)
// receives, through the OTel API only, with attribute fencelock.backend:
// fencelock.acquire.attempts, .acquired (= fences issued), .not_acquired,
// fencelock.acquire.wait (s), fencelock.lease.hold (s),
// fencelock.lease.renew_failures, fencelock.lease.lost and
// fencelock.fence.last.
//
// # Errors
//
// Every error is a *Error wrapping one cause; test causes with errors.Is:
// ErrNotAcquired, ErrLeaseLost, ErrReleased, ErrClosed, ErrUnavailable,
// ErrIndeterminate, ErrInvalid. A cancelled or deadlined Acquire returns an
// error for which errors.Is(err, ctx.Err()) holds and leaves nothing held;
// Acquire's own Wait bound returns ErrNotAcquired.
package fencelock

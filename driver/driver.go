// Package driver defines the small interface a fencelock backend implements.
//
// Application code never uses this package: it uses the portable
// *fencelock.Client and *fencelock.Lease.
//
// # Who owns what
//
// The portable layer owns what is the same on every store: input
// validation, owner tokens, the lease's local validity deadline, renewal
// and MaxHold, lease-loss signalling to the application (Lease.Done),
// release on a detached context, metrics and errors.
//
// Waiting belongs to the store where the store can do it: a backend whose
// store queues waiters or notifies them implements Blocker and owns the
// whole wait (every backend shipped here but mem). The portable loop —
// TryAcquire, then Waiter.Wait or a sleep, spaced by Options.Backoff — is
// the fallback for a store that can only be polled. Pieces a Blocker
// needs are shared, not copied: NewToken for each attempt's token,
// AcquireRequest.Backoff for the Client's backoff, and (inside this module)
// internal/localq for the per-Client queue of waiters.
//
// # What a backend implements
//
// Required: Backend (TryAcquire, Capabilities, Close) and Lease (Fence,
// Extend, Release). Optional, each for one thing a store may do better
// than the default:
//   - Blocker: the store queues or notifies waiters (see above);
//   - Waiter: a polling store can still tell when a lock may be free;
//   - LossNotifier: the store can say a lease is gone before a renewal
//     would find out;
//   - TimedTryAcquirer: the grant's TTL clock started before the call
//     (etcd's shared leases);
//   - GrantedTTLer: the store keeps the lock longer than asked;
//   - HoldBounder: the store may keep the lock shorter than a long TTL;
//   - Aser: the native client or handle, for Client.As and Lease.As.
//
// Admin and the hooks beside it (admin.go) are not for applications: they
// act on the store out of band, for the conformance suite.
//
// Every method's doc comment is a contract; the conformance suite
// (package conformance) checks it through the portable types.
package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"
)

// AcquireRequest is one attempt to take a named lock.
type AcquireRequest struct {
	// Name is the store key of the lock, already prefixed and validated by the
	// portable layer: non-empty valid UTF-8 of at most MaxNameLen bytes.
	Name string
	// Token is a 128-bit random owner token (32 lowercase hex characters),
	// unique to this attempt. Stores that keep an owner value keep this one,
	// so that Extend and Release can be owner-checked.
	Token string
	// TTL is how long the store keeps the lock without a renewal. It is at
	// least Capabilities().MinTTL.
	TTL time.Duration
	// Label describes the holder for humans and for Inspect (by default,
	// the host and process). A store that keeps labels
	// (Capabilities.Inspect.Label) stores it with the lock where the
	// store's native clients still read the lock as theirs, or beside it.
	// At most MaxLabelLen bytes of valid UTF-8.
	Label string
	// Backoff is the Client's Options.Backoff (never nil in a request to
	// Blocker.Acquire): a Blocker whose wait retries attempts spaces them
	// with it. A store that queues waiters or polls on a schedule of its
	// own may ignore it.
	Backoff func(attempt int) time.Duration
}

// NewToken returns a fresh 128-bit random owner token (32 lowercase hex
// characters), as the portable layer makes them for AcquireRequest.Token:
// a Blocker that makes several attempts within one Acquire uses a new one
// for each.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// MaxLabelLen is the longest label, in bytes, the portable layer accepts.
const MaxLabelLen = 256

// MaxNameLen is the longest lock name, in bytes, the portable layer accepts.
const MaxNameLen = 1024

// Backend is a lock store.
type Backend interface {
	// TryAcquire makes one attempt to take req.Name.
	//
	// It returns ErrNotAcquired (wrapped or not) if another holder has the lock,
	// a lease with a fence greater than every fence earlier issued for the
	// name, or another error. When it returns an error nothing may be left
	// held: if the outcome is unknown (ctx ended or the connection broke after
	// the request was sent), the backend removes any lock held under
	// req.Token before it returns, on a context detached from ctx.
	// A store that cannot be reached yields an error wrapping ErrUnavailable.
	TryAcquire(ctx context.Context, req AcquireRequest) (Lease, error)

	// Capabilities describes the backend. It must not do I/O.
	Capabilities() Capabilities

	// Close releases the backend's resources (connections, goroutines).
	// Leases still held are abandoned: the store frees them when they expire.
	Close() error
}

// Lease is a lock held in the store.
type Lease interface {
	// Fence is the fencing token of this grant: for one name, strictly greater
	// than the fence of every earlier grant (see Capabilities.Fence for how
	// strong that promise is). It fits in an int64 and is never 0.
	Fence() Fence

	// Extend sets the store-side expiry of the lock to ttl from now, only if
	// the lock is still held under this lease's token. It returns
	// ErrLeaseLost if it is not (expired, taken over, released), or another
	// error if the store could not be asked (the lease may still be held).
	Extend(ctx context.Context, ttl time.Duration) error

	// Release frees the lock only if it is still held under this lease's
	// token. It returns ErrLeaseLost if the lock was no longer ours; it never
	// removes another holder's lock. It is called at most once.
	Release(ctx context.Context) error
}

// Waiter is implemented by a Backend that can tell a waiter when a held lock
// may have become free (a watch, pub/sub, a keyspace notification).
//
// Without it the portable layer polls with jittered backoff. With it, the
// portable layer calls Wait after a failed TryAcquire, bounded by the backoff
// interval, and retries TryAcquire whatever Wait returns: wake-ups are hints.
type Waiter interface {
	// Wait returns nil when the lock named name may be free, or ctx.Err()
	// when ctx ends first. It must not miss a release that happens after
	// Wait was called; it may return early (spurious wake-ups are allowed).
	Wait(ctx context.Context, name string) error
}

// Blocker is implemented by a Backend whose store queues waiters itself
// (a server-side lock queue, an etcd or ZooKeeper sequential-key recipe).
// The portable Acquire then calls Acquire instead of polling TryAcquire.
type Blocker interface {
	// Acquire blocks until req.Name is granted (same result as TryAcquire)
	// or ctx ends. When ctx ends it returns an error for which
	// errors.Is(err, ctx.Err()) holds and leaves nothing held, even if the
	// store granted the lock while the call was being cancelled.
	//
	// With the lease it returns sent: a local time.Now() taken no later than
	// the moment the store started the lease's TTL clock (for example, when
	// the request that granted the lock, or the last renewal made while
	// waiting, was sent). The portable layer computes the lease's validity
	// deadline from it, so it must never be later than the truth.
	Acquire(ctx context.Context, req AcquireRequest) (l Lease, sent time.Time, err error)
}

// TimedTryAcquirer is implemented by a Backend whose TryAcquire can grant
// a lease whose TTL clock started before the call: a store whose TTLs
// belong to a shared session or lease renewed on its own schedule (etcd's
// one lease per TTL class), where restarting that clock on every attempt
// would cost a request. The portable TryAcquire then calls TryAcquireAt
// instead of TryAcquire.
type TimedTryAcquirer interface {
	// TryAcquireAt is TryAcquire that also returns sent, as
	// Blocker.Acquire does: a local time.Now() taken no later than the
	// moment the store started the granted lease's TTL clock. The portable
	// layer counts the lease's validity from the earlier of sent and the
	// moment it called TryAcquireAt, so sent must never be later than the
	// truth.
	TryAcquireAt(ctx context.Context, req AcquireRequest) (l Lease, sent time.Time, err error)
}

// LossNotifier is implemented by a Lease whose store can say the lease is
// gone before a renewal would find out (a session expired, a connection
// that held the lock died). It is a callback, not a channel, so that the
// portable layer parks no goroutine per lease: a Client holding many
// leases runs O(1) goroutines.
type LossNotifier interface {
	// OnLost arranges for f to be called once, in its own goroutine, when
	// the store has dropped the lease (never after a successful Release).
	// stop unregisters f and reports whether it stopped f from being
	// called, like context.AfterFunc's stop; a lease whose loss cancels a
	// context implements OnLost with context.AfterFunc.
	OnLost(f func()) (stop func() bool)
}

// Aser is implemented by a Backend that exposes its native client to the
// portable Client.As escape hatch, and by a Lease that exposes its native
// handle (a transaction, a session) to Lease.As.
type Aser interface {
	// As sets *target to the native client if target has a supported type
	// and reports whether it did.
	As(target any) bool
}

// HoldBounder is implemented by a Lease whose store may keep the lock for
// less than a long TTL asked: ZooKeeper keeps an ephemeral node one
// session timeout after the server last heard from the session, so a
// lease whose TTL exceeds its session's timeout is gone that long after a
// holder froze (SIGSTOP, a VM pause), before its TTL. The portable layer
// bounds the local deadline by a request's send time plus HoldBound, and
// renews at a third of the smaller of the two.
type HoldBounder interface {
	// HoldBound is how long after a request is sent the store certainly
	// keeps the lock, whatever the TTL; 0 means no bound beyond the TTL.
	HoldBound() time.Duration
}

// GrantedTTLer is implemented by a Lease whose store may keep the lock
// longer than the TTL requested (etcd raises lease TTLs below its minimum;
// ZooKeeper negotiates the session timeout). The portable layer keeps its
// local deadline from the requested TTL (conservative for the holder) and
// reports the granted one in Lease.StoreTTL, which is how long others may
// have to wait for an abandoned lock.
type GrantedTTLer interface {
	// GrantedTTL is the TTL the store granted for the last acquire or
	// renewal; at least the TTL requested.
	GrantedTTL() time.Duration
}

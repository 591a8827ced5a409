// Package memory is the mem:// reference backend: an in-process lock store
// that passes the whole conformance suite. Use it in unit tests of code that
// takes a [fencelock.Locker], instead of a mock.
//
// # Opening
//
// With the package imported (a blank import suffices), by URL (no query
// parameters besides fencelock's own prefix, ttl and wait):
//
//	mem://          the process-wide default store (every mem:// client shares it)
//	mem://NAME      a named store, shared by every mem://NAME client in the process ([Named])
//	memrpc://HOST:PORT  a Store served by another process with [Serve] (multi-process tests)
//
// In Go, New takes a *[Store] ([NewStore]; a new empty one if nil).
//
// # Fences
//
// A per-name counter that release and expiry never reset: FenceStrict within
// the process that holds the Store.
//
// # Expiry and waiting
//
// Locks expire on the monotonic clock of the process holding the Store
// (the minimum TTL is 1 ms); an expiry or Store.Expire reports loss to the
// holder's lease at once (driver.LossNotifier) and wakes waiters
// (driver.Waiter), as a release does. Waiters retry TryAcquire when woken
// or after Options.Backoff; they are not queued (FIFO is false).
//
// # Labels and Inspect
//
// The label is kept in the Store's entry for the lock; Inspect reports the
// holder's label, fence and remaining TTL (no waiter count: waiters are not
// queued), and Lease.SetLabel changes it in place. memrpc:// does the same
// over its RPC.
//
// # As
//
// [fencelock.Client.As] gives **[Store] and *[Session] (see
// Store.KillSession).
package memory

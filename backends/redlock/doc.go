// Package redlock is the fencelock backend for Redlock (scheme redlock://):
// one lock kept on N independent Redis primaries (N odd, at least 3; 5 is
// usual), granted by a majority, so that it survives the loss of any
// minority of them — and, unlike every other Redlock implementation, with a
// fencing token that keeps increasing even when Redlock's timing
// assumptions fail.
//
// # Opening
//
// With the package imported (a blank import suffices), by URL:
//
//	locks, err := fencelock.Open(ctx, "redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379,10.0.0.4:6379,10.0.0.5:6379")
//
// The URL is redlock://[[user]:password@]host:port,host:port,...[/db]: port
// 6379 by default, the path is the database number on every primary
// (default 0), user and password apply to every primary. Query parameters,
// besides fencelock's own prefix, ttl and wait:
//
//	addr=host:port  one more primary; may repeat; addr=rediss://host:port
//	                connects to that one with TLS
//	pool_size=N     connections per primary (default: go-redis's, 10 per CPU)
//	protocol=2|3    RESP version (default 2)
//
// In Go, New takes one *goredis.Client per primary (not replicas of each
// other, not a Redis Cluster); it does not close them. The first primary
// given (in the URL or to New) is the lead, which orders blocked Acquires.
//
// # Fences
//
// The fence is time-floored ([driver.FenceTimeFloored]): each primary
// keeps a counter per lock, floored by its server time in microseconds;
// the fence is the majority-th smallest of the granting primaries'
// counters, and it is stored on a majority before the lease is returned.
// Any two leases that reached that write-back are ordered by their fences
// without trusting a clock, even when Redlock's mutual exclusion fails (a
// paused client, a slow network, a clock jump); only a primary that
// restarts empty falls back on its clock. With every primary durable
// (appendonly yes, appendfsync always) the order is strict. Fences are about
// 1.8e15, fit an int64 and are exact as JSON numbers.
//
// The minimum TTL is 20 ms; TTLs are whole milliseconds. A grant or renewal that
// took longer than the TTL minus [DriftFactor] × TTL minus [DriftMin]
// (1% + 2 ms) counts as failed. A blocked Acquire is woken by release
// notices (pub/sub) or by the holder's keys running out; Clients' waiters
// queue on the lead primary, so they do not split the votes, and a
// release wakes only the next one in line.
//
// # Weaknesses
//
// Redlock assumes a restarted primary kept its locks (persistence with
// fsync) or stays out for a TTL. If the primaries holding a lease restart
// empty one after another faster than the TTL, a second client can be
// granted the lock while the first still believes it holds it, until the
// first one's next renewal reports [fencelock.ErrLeaseLost]. The second
// lease's fence is higher, so a resource that checks fences (package guard)
// loses nothing. Run Redis with appendfsync always, or keep a restarted
// primary out for a TTL.
//
// # Interop with redsync
//
// On every primary the lock key is the name after [fencelock.Options].Prefix,
// exactly as named, holding the owner token (32 hex characters) with a PX
// expiry: redsync's layout (and redis-py's), so a redsync Mutex on the same
// name and primaries and fencelock exclude each other. A key without an
// expiry is never taken over. Beside it the backend keeps keys named by
// the lock key, the byte 0xFF and a suffix: ":fence" (no TTL, never
// deleted), ":label:<token>" while held, ":void:<token>" (5 minutes, after
// an abandoned attempt), and on the lead primary ":queue" and
// ":queue:deadlines" while Acquires wait, and ":gone" (the token of the
// last lease released to a waiter, expiring with its key); Release
// PUBLISHes on ":released", and on the lead also on ":released:<id>" of
// the Client whose waiter is next in the queue. Under contention a
// Release hands the lock to that waiter: it deletes the key on the lead
// only, and the waiter's acquire replaces the released token's keys on
// the other primaries, so a redsync Mutex may see the name held by the
// released token for about a round trip. A redis-cli user sees these
// keys.
//
// # Inspect
//
// [fencelock.Client.Inspect] is a majority read: held when one token holds
// a majority of primaries, with its newest label and the majority-th
// longest remaining TTL. The fence (a client-side quorum decision, stored
// as such on no primary) and a waiter count are not reported. SetLabel is
// supported.
//
// # As
//
// [fencelock.Client.As] gives the go-redis clients, one per primary, for
// target type *[]*goredis.Client.
//
// # Timeouts
//
// Pass go-redis clients with ContextTimeoutEnabled (clients opened from a
// URL have it). An unreachable majority yields errors wrapping
// [fencelock.ErrUnavailable]; a ctx that ends mid-call, ctx.Err(), after the
// attempt was abandoned; an abandon that cannot confirm a majority free
// also wraps [fencelock.ErrIndeterminate]. go-redis's process-wide logger
// is left to the application; [LogGoRedisTo] routes or drops its lines.
package redlock

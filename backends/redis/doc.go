// Package redis is the fencelock backend for Redis (schemes redis:// and
// rediss://), on one server or on Redis Cluster, through go-redis v9. It
// needs Redis 6.2 or later (or a server compatible with it).
//
// # Opening
//
// With the package imported (a blank import suffices), by URL:
//
//	locks, err := fencelock.Open(ctx, "redis://127.0.0.1:6379/0")
//	locks, err := fencelock.Open(ctx, "redis://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000?cluster=true")
//
// The URL is redis://[[user]:password@]host[:port][,host[:port]...][/db]:
// port 6379 by default, the path is the database number (default 0), and
// rediss:// connects with TLS (URLOpener.TLSConfig). Query parameters,
// besides fencelock's own prefix, ttl and wait:
//
//	cluster=true    Redis Cluster (default false; implied by several hosts)
//	addr=host:port  one more host; may repeat
//	pool_size=N     connections per server (default: go-redis's, 10 per CPU)
//	protocol=2|3    RESP version (default 2)
//
// A client opened by URL has ContextTimeoutEnabled set and a ClientName of
// "fencelock-" and 12 random hex digits; with RESP2 its connections skip
// go-redis's health-check peek while used within the last second (a
// connection the server closed meanwhile fails its next command, which
// go-redis retries on another; see URLOpener). In Go, New takes a go-redis client
// (a *goredis.Client, or a *goredis.ClusterClient for Redis Cluster):
// enable ContextTimeoutEnabled in its options, or the ctx of Acquire and the
// lease's deadline do not bound its calls. The Client does not close a
// go-redis client it was given.
//
// # Fences
//
// The fence is time-floored ([driver.FenceTimeFloored]): max(stored + 1,
// the server's TIME in microseconds), issued in the same script that sets
// the lock. Fences are about 1.8e15, fit an int64 and are exact as JSON
// numbers. While the server keeps its data they strictly increase; after
// data loss (a restart without persistence, a failover to a replica that
// missed writes) they still rise unless the new server's clock is behind
// the old one's by more than the outage lasted.
//
// TTLs are rounded up to whole milliseconds; the minimum is 10 ms
// (Capabilities().MinTTL). Expiry is decided by the server's clock. A blocked Acquire
// waits in a line on the server and a Release hands the lock straight to
// the first live waiter.
//
// # Weaknesses
//
// Redis replicates asynchronously: a primary that fails after a grant that
// had not reached its replica loses the lock, and a second client can be
// granted the same name while the first still holds it (NodeLoss is
// [driver.NodeLossUnsafe]; WAIT narrows but does not close the window). The
// second lease's fence is higher, so a resource that checks fences (package
// guard) refuses the stale holder. A restart without persistence forgets
// every lock likewise. Use redlock://, etcd or ZooKeeper for a lock that
// itself survives node loss.
//
// # Interop with redis-py and redsync
//
// The lock key is the name after [fencelock.Options].Prefix, exactly as
// named: a string holding the owner token (32 hex characters, new for every
// grant) with a PX expiry, the shape of redis-py's Lock and redsync, so
// their workers and fencelock exclude each other on the same key. A key
// that exists is never taken over; one without an expiry (redis-py
// timeout=None) is never freed by fencelock. Beside it, under a hash tag of
// the key's slot, the backend keeps a fence key (for "orders:42",
// "{orders:42}:fence"; no TTL, never deleted: one small key per name ever
// used), a label key "{orders:42}:label:<token>" while held, and a waiter
// line and liveness keys while Acquires wait. A redis-py user sees these
// extra keys. Names that spell such a derived key (a hash tag and a suffix
// like ":fence") are escaped to the lock key name + ":fencelock" and
// interoperate under that key only.
//
// # Inspect
//
// [fencelock.Client.Inspect] reports the holder's label, fence and
// remaining TTL (PTTL). A redis-py or redsync holder reads as held with no
// label and fence 0. No waiter count is reported. SetLabel is supported.
//
// # As
//
// [fencelock.Client.As] gives *goredis.UniversalClient always, and
// *goredis.Client or *goredis.ClusterClient for that kind of client.
//
// # Errors and logging
//
// An unreachable or unresponsive server yields errors wrapping
// [fencelock.ErrUnavailable]; a ctx that ends mid-call, ctx.Err(). When
// TryAcquire cannot tell whether a grant happened and cannot reach the
// server to undo it, the error wraps [fencelock.ErrIndeterminate]: the lock
// may stay held until its TTL. go-redis's process-wide logger is left to
// the application; [LogGoRedisTo] routes or drops its lines.
package redis

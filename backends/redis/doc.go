// Package redis is the fencelock backend for Redis (schemes redis:// and
// rediss://), on one server or on Redis Cluster, through go-redis v9.
//
//	import (
//		goredis "github.com/redis/go-redis/v9"
//		"github.com/fencelock/fencelock/backends/redis"
//	)
//
//	locks := redis.New(goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true}), nil)
//
// or, with the package imported (a blank import suffices), by URL:
//
//	locks, err := fencelock.Open(ctx, "redis://127.0.0.1:6379/0")
//	locks, err := fencelock.Open(ctx, "redis://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000?cluster=true")
//
// See URLOpener for the URL's parameters. Client.As gives the go-redis
// client: *goredis.UniversalClient always, and *goredis.Client or
// *goredis.ClusterClient for that kind of client.
//
// # Keys
//
// For a lock whose store key is K (the name, after Options.Prefix):
//
//   - Lock key K, exactly as named (but see Reserved names). While held it
//     is a string holding the
//     owner token (32 hex characters, new for every grant) with a PX
//     expiry: the same shape as redis-py's Lock and redsync, so a Python or
//     redsync worker locking the same key string excludes fencelock clients
//     and is excluded by them. A key that exists is never taken over, and
//     a key without an expiry (redis-py timeout=None) is never freed by
//     fencelock: TryAcquire reports it and waits.
//   - Fence key B:fence, where B is K if K holds a valid hash tag ("{...}"
//     with something inside), else {K} if K has no '}', else {T}K where T
//     is the smallest integer, written in base 36, whose hash slot is K's.
//     For K = "orders:42" it is "{orders:42}:fence"; for "{user:7}:jobs" it
//     is "{user:7}:jobs:fence". It holds the last fence as a decimal
//     integer, has no TTL and is never deleted (release and expiry leave it;
//     one small key per lock name ever used).
//   - Release channel B:released: a release that found waiters' entries
//     but none of them live PUBLISHes K on it (see Waiting).
//   - Void key B:void:<token>, only after an acquire attempt whose reply was
//     lost (see Operations); it expires after 5 minutes.
//   - Waiter line B:line:fencelock if B is K itself (K has a hash tag),
//     else B:line:k:fencelock, and liveness keys B:wait:<token>, only
//     while Acquire calls wait (see Waiting). Two lock keys can share B
//     ("x" and "{x}"); the two suffixes keep their lines apart.
//
// All these keys share a hash tag of K's slot, so every script touches one
// Redis Cluster slot.
//
// The scripts use GETDEL and SET ... GET: the backend needs Redis 6.2 or
// later (or a server compatible with it).
//
// # Reserved names
//
// A derived key is a base with a valid hash tag followed by ":fence",
// ":released", ":queue", or ":void:" or ":wait:" and 32 hex digits, so a
// name such as "{x}:fence" spells the fence key of the name "x". Such names
// are reserved: a store key that has a valid hash tag ("{...}" with
// something inside) and ends in ":fence", ":released", ":queue",
// ":fencelock", or ":void:" or ":wait:" followed by 32 lowercase hex digits
// gets the lock key K + ":fencelock"
// instead of K (same hash tag, so same slot; its fence key is
// K + ":fencelock:fence"). Lock keys and derived keys thus never meet, and
// distinct names never share a lock key. (The waiter line ends in
// ":fencelock" too, but is no escaped key: B + ":line" and B + ":line:k"
// are not reserved. ":queue", the waiter queue of earlier versions, stays
// reserved, so that no name changed its lock key; see Mixed versions.)
// Every other name, which is every
// name without braces, is its own lock key and interoperates with
// redis-py and redsync; a reserved name interoperates under its escaped
// key only.
//
// # Operations
//
// Each is one Lua script (EVALSHA, loaded from acquire.lua, release.lua and
// extend.lua):
//
//   - Acquire: SET K token NX PX ttl; only if that succeeds, fence =
//     max(stored + 1, server TIME in microseconds), stored back and returned.
//     A free lock with nobody in line costs one MGET (lock, fence and void
//     keys), EXISTS on the waiter line, the SET, TIME and the fence's SET.
//     A blocked attempt refused by a held lock costs the MGET, PTTL of K,
//     SET ... GET of its liveness key, an RPUSH to the line when it joins
//     (not when it refreshes) and a PEXPIRE of the line.
//     A retried script whose first run was granted (its reply lost) answers
//     the same grant.
//   - Abandon: when the outcome of an attempt is unknown (ctx ended or the
//     connection broke after the request was sent), TryAcquire releases a
//     grant made under that attempt's token and marks the token void before
//     it returns, so the request grants nothing if a stalled server only
//     runs it later. If the server cannot be reached for that either, the
//     error wraps ErrIndeterminate: the lock may stay held until its TTL.
//   - Release: only if K holds our token, hand it to the first live waiter
//     in line, or delete it (compare-and-delete; a PUBLISHed release notice
//     if the line held only dead waiters, see Waiting). Otherwise
//     ErrLeaseLost; another holder's lock is never touched. With nobody in
//     line it costs one MGET (lock and fence keys), an LPOP of the line and
//     the DEL; a hand-off, the MGET, the LPOP, GETDEL of the waiter's
//     liveness key, the SET of K, TIME, the fence's SET and the PUBLISH of
//     the grant.
//   - Extend (renewal): PEXPIRE K only if it holds our token, else
//     ErrLeaseLost.
//
// TTLs are rounded up to whole milliseconds; the minimum is MinTTL. Expiry
// is decided by the server's clock (Capabilities.TimeAuthority).
//
// # Fences
//
// The fence is time-floored (driver.FenceTimeFloored): fences are about
// 1.8e15 (microseconds since 1970), fit an int64 and are exact as JSON
// numbers. While the server keeps its data they strictly increase. A bare
// INCR counter would restart at 1 when that data is lost, by a restart
// without persistence or a failover to a replica that missed the last
// writes; the time floor keeps the next fence above every earlier one as
// long as the new server's clock is not behind the old one's by more than
// the outage lasted (a restart or failover takes seconds; NTP keeps
// clocks within milliseconds). That is the one assumption: a server clock
// set back by hours can repeat fences after data loss. Fences are issued
// far slower than one per microsecond per name (each needs a round trip),
// so the counter never runs ahead of the clock.
//
// # Failover: what the lock does not survive
//
// Redis replicates asynchronously. If a primary fails after granting a
// lock but before the grant reached its replica, the promoted replica has
// no lock key: a second client is granted the same name while the first
// still believes it holds it (Capabilities.NodeLoss is NodeLossUnsafe).
// The fence still orders them (the second lease's fence is higher, by the
// time floor), so a resource that checks fences (package guard) rejects
// the stale holder's writes; without fencing, both write.
//
// WAIT numreplicas timeout after a grant makes the primary wait until that
// many replicas have the write. It narrows the window but does not close
// it: Redis may still promote a replica that did not acknowledge, and a
// timed-out WAIT does not undo the grant. Only a consensus store (etcd,
// ZooKeeper) or a quorum of independent servers (redlock://) makes the lock
// itself survive node loss.
//
// # Waiting: fair hand-off
//
// A blocked Acquire waits in line on the server, and a release hands the
// lock straight to the first live waiter, in the release script itself:
//
//   - Waiter line (B:line:fencelock, see Keys), a list of waiting tokens in
//     arrival order, and per waiter a liveness key B:wait:<token> holding
//     the TTL to grant it with. The liveness key expires unless the waiter
//     refreshes it (every TTL/4, at most every second; it lasts three
//     refreshes, at least 300 ms), so a waiter that died drops out of line
//     by itself. Both exist only while someone waits (a line of dead
//     waiters' entries expires 6 s, or twice the liveness if longer, after
//     the last join or refresh; an emptied line is gone at once). The
//     scripts name liveness keys themselves (they share the lock's hash
//     tag, hence its slot).
//   - A refused blocked attempt joins the line, or keeps its place: SET of
//     its liveness key with GET tells whether it had one; if not, it RPUSHes
//     its token. A waiter whose liveness lapsed (it stalled) and who then
//     refreshes joins again at the end, so a token can be in line twice;
//     a refreshing waiter whose entry is gone (the line was deleted) is put
//     back (LPOS).
//   - Release, in the same script, pops the line's head and GETDELs its
//     liveness key, dropping heads whose key is gone, until one is live;
//     then it overwrites the lock key with that waiter's token and TTL,
//     issues its fence exactly as Acquire does, and PUBLISHes
//     "grant <token> <fence>" on that waiter's
//     Client's grant channel, B:released:<client id> (32 hex digits, random
//     per Client, stored with the waiter's TTL in its liveness key), which
//     only that Client subscribes to: a grant wakes one Client, not every
//     Client waiting on the lock. With nobody in line the release publishes
//     nothing: a waiter is in line before it sleeps (its queued attempt ran
//     before the release, or after it and found the lock free). When the
//     line held only dead waiters' entries, it PUBLISHes the lock key on
//     the release channel (a release notice, heard by all), so that a
//     waiter whose liveness lapsed (it stalled) asks again at once.
//   - The waiter holds when that message reaches it: a hand-off costs the
//     holder's release call and one message, no waiter round trip, and its
//     lease counts from its last refresh (sent before the grant). If it
//     finds most of the TTL gone (it stalled), it asks again, and the
//     acquire script answers its grant with the TTL restarted.
//   - While a live waiter is in line, a free lock (a holder expired, or a
//     peer such as redis-py released it without publishing) is granted
//     only to that waiter: TryAcquire and later arrivals are refused with
//     a message that waiters queued first. The waiter asks when the
//     holder's TTL runs out (the refused attempt returns it) and at each
//     refresh.
//   - A token is granted only by the script that deletes its liveness key
//     (a hand-off's GETDEL, or its own attempt at the head of the line of
//     a free lock), and every script that removes a token's entries deletes
//     that key: a stale second entry of a granted token finds no key and is
//     dropped. A token is thus handed the lock at most once per join, never
//     again for a stale entry.
//   - A waiter whose wait ends without a grant (ctx ended, Client closed)
//     leaves the line (every entry of its token) in the abandon script,
//     which also releases, to the next in line, a grant handed to it
//     meanwhile: it leaves nothing held.
//   - A waiter that died within its liveness window may still be handed
//     the lock, which then stays held for that waiter's TTL, as after a
//     holder's crash.
//
// Each Client keeps at most two pub/sub connections, whatever the number of
// its waiters. The lane serves one blocked Acquire at a time: it reads its
// own connection, so its grant wakes it straight from the network poller,
// with no goroutine in between. Every other waiter of the Client shares the
// hub, one connection read by one dispatcher goroutine. Both subscribe to
// the channel of each lock waited for and to the Client's own grant channel
// for that lock (the lane's id differs from the hub's), and keep them for a
// second after the last wait ended, so that a client looping on a lock
// does not resubscribe each time (the lane then closes its connection). A
// waiter joins the line only once the server confirmed its subscription (a
// PING reply, one per channel per connection), so no grant is published
// before it can hear it. If a connection breaks, its waiters ask again
// (the attempt answers a grant made meanwhile); a lane that cannot connect
// hands its waiter to the hub. A lane wait whose ctx ends closes the lane's
// connection, the only way to interrupt its read; the next wait dials
// again. Within a Client, waiters on a name queue in arrival order
// and only the first of them is in the server's line: Clients are served
// in arrival order, and a Client's waiters in theirs. (FIFO is false only
// because a Client's second waiter joins the server's line when its first
// is served.)
//
// In Redis Cluster the release notice is a plain PUBLISH, which the cluster
// broadcasts to every node, so each subscription connection (to any node)
// hears every shard and survives failover; sharded pub/sub would avoid the broadcast
// but need a connection per shard.
//
// # Mixed versions
//
// Earlier versions kept waiters in a sorted set B:queue; this one uses the
// list above, under another name, so a rolling deploy with old and new
// Clients on one lock never meets a key of the wrong type. Both kinds of
// Client share the lock key, the fence key and its formula, and the
// reserved names (no name has another lock key in either version), so a
// lock still has at most one holder and fences still grow. What degrades
// is waiting: each version sees only its own waiters, so a Client takes a
// free lock past the other version's waiters (as a peer such as redis-py
// does), and a release hands over only to its own version's waiters; the
// other version's waiters find the lock free when they next ask, at the
// holder's expiry or their refresh (at most a second, or TTL/4, later).
// Once the old Clients are gone, their B:queue expires by itself.
//
// # Redis Cluster failover
//
// go-redis reloads its slot map on MOVED replies and every
// ClusterStateReloadInterval (60s by default), not when a primary stops
// answering. The backend asks it to reload whenever a cluster call fails
// to reach a node, so acquiring works again as soon as a replica is
// promoted (about NodeTimeout plus the election), not a minute later.
//
// # Admin
//
// The backend implements driver.Admin, the out-of-band hooks
// `fencelock conformance --url` uses (not handed out by Client.As):
//
//   - Expire DELs a lock key whoever holds it, as if its TTL had passed;
//     never the fence key, and nothing is published (expiry publishes
//     nothing either).
//   - KillSessions does what a session-owning store does when a client's
//     session is cut (Redis has none: a lock outlives the connection that
//     set it): it deletes every lock this Client holds, each only while it
//     still holds this Client's token, then kills this Client's
//     connections on every server (CLIENT KILL ID), its pub/sub connections
//     included. The holders' next renewal finds the lock gone; go-redis
//     reconnects for later requests. The connections are found in CLIENT
//     LIST by the go-redis ClientName: clients opened by URL get a unique
//     "fencelock-" name (see URLOpener); a client given to New needs a
//     ClientName no other process uses, else KillSessions returns
//     ErrInvalid.
//
// # Logging
//
// go-redis logs some errors (a pool that cannot dial) to stderr through a
// process-wide logger. fencelock returns those errors to the caller as
// well, but leaves that logger to the application, which may use go-redis
// itself: opening a lock never changes it. LogGoRedisTo sends the lines to
// a *slog.Logger, or drops them.
//
// # Timeouts
//
// Pass a go-redis client with ContextTimeoutEnabled (clients opened from a
// URL have it): then the ctx of Acquire and the lease's validity deadline
// bound every call. An unreachable or unresponsive server yields errors
// wrapping fencelock.ErrUnavailable; a ctx that ends mid-call yields an
// error wrapping ctx.Err().
//
// # Labels and Inspect
//
// The lock key keeps the bare token, so redis-py and redsync still read and
// release it as theirs. The label lives beside it, in
// B:label:<token> ("<fence> <label>", B the lock's base as above), written
// by the script that grants (acquire.lua, or the release that hands a
// waiter the lock: a queued waiter writes "0 <label>" there when it queues,
// and the hand-off stamps the fence), expiring with the lock and renewed
// with it; SetLabel rewrites it while the lock holds our token. A redis-py
// user sees one more key per held lock. Inspect is one read-only script:
// the holder's token, PTTL and label key; a redis-py or redsync holder reads
// as held with no label and fence 0. The waiter line may hold stale
// entries, so no waiter count is reported. Names ending in ":label:"
// followed by 32 hex digits (with a hash tag) are now reserved and escaped,
// like ":void:" and ":wait:".
package redis

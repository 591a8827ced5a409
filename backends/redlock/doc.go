// Package redlock is the fencelock backend for Redlock (scheme redlock://):
// one lock kept on N independent Redis primaries (N odd, at least 3; 5 is
// usual), granted by a majority, so that it survives the loss of any
// minority of them — and, unlike every other Redlock implementation, with a
// fencing token that keeps increasing even when Redlock's timing
// assumptions fail.
//
//	import (
//		goredis "github.com/redis/go-redis/v9"
//		"github.com/fencelock/fencelock/backends/redlock"
//	)
//
//	var primaries []*goredis.Client
//	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379"} {
//		primaries = append(primaries, goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true}))
//	}
//	locks := redlock.New(primaries, nil)
//
// or, with the package imported (a blank import suffices), by URL:
//
//	locks, err := fencelock.Open(ctx, "redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379,10.0.0.4:6379,10.0.0.5:6379")
//
// See URLOpener for the URL's parameters. Client.As gives the go-redis
// clients, one per primary, for target type *[]*goredis.Client.
//
// # Algorithm
//
// Every operation is sent to all N primaries at once, each as one Lua
// script (acquire.lua, writeback.lua, extend.lua, release.lua), and decided
// as soon as the replies allow; the quorum Q is N/2+1.
//
//   - Acquire: on each primary, SET K token NX PX ttl and, only if that
//     succeeds, bump the primary's fence counter to max(stored + 1, server
//     TIME in µs, truncated to the millisecond while a counter is stored)
//     and return it. The attempt
//     is granted when Q primaries granted within the validity (below), and
//     refused as soon as N−Q+1 refused or failed. The fence is the Q-th
//     smallest counter the granting primaries returned; W is the granting
//     primaries that returned exactly the fence (they store it already)
//     plus, if those are fewer than Q, primaries that returned less and get
//     the fence written back (raised to it, only while the lock still holds
//     our token there) until W is a majority. The lease is returned only
//     after that. Usually a majority returns the same value (their
//     counters agree and their clocks read the same millisecond; a grant
//     still on its way is awaited briefly for that) and no write-back is
//     needed. On the first grant of a name (or the first after a primary
//     lost its counter) the primaries return their full server time in µs
//     (see # Fences), so they disagree and the write-back is needed.
//   - Abandon: a failed attempt — refused, too slow, or ctx ended mid-flight
//     — releases the lock on every primary that granted it and on every
//     primary whose reply never came, and marks the token void there, so
//     that the request, if a stalled primary only runs it later, grants
//     nothing. It returns once every primary that granted has answered and
//     a majority is known free of the token; calls to frozen primaries go
//     on in the background (bounded by min(TTL, 2s)). If a majority cannot
//     be confirmed free, the error also wraps ErrIndeterminate. The void
//     reaches a frozen primary only if the abandon could be written to it:
//     when every pooled connection to it is stuck on a request, go-redis
//     cannot open a new one (its handshake waits for the frozen server), so
//     an acquire request stuck there may grant a dead token when it thaws.
//     That token holds that primary alone (no lease has it) until its TTL
//     runs out.
//   - Extend (renewal): PEXPIRE K on every primary where it holds our token;
//     it succeeds when Q did so within the validity of the new TTL, and
//     reports the lease lost (ErrLeaseLost, and frees the rest) as soon as
//     N−Q+1 primaries no longer hold our token: a minority restarted empty
//     or a majority expired. When a renewal cannot reach Q primaries before
//     the lease's local deadline, the lease ends there (ErrLeaseLost).
//   - Release: delete K where it holds our token and PUBLISH a notice there
//     (compare-and-delete); nil once Q released, ErrLeaseLost once N−Q+1 did
//     not hold our token. Another holder's lock is never touched.
//
// One Client makes at most one acquire attempt at a time per lock (a
// concurrent TryAcquire gets ErrNotAcquired at once): two attempts from
// one place would only split the primaries' votes, so that neither gets a
// majority. Its blocked Acquires (driver.Blocker) queue up locally in
// arrival order and only the first makes attempts; see # Waiting.
//
// # Validity and the drift factor
//
// A majority that answers late grants nothing: an acquire (including its
// fence write-back) or a renewal that took longer than TTL − DriftFactor ×
// TTL − DriftMin (1% of the TTL plus 2 ms, Redlock's own figures) from when
// it was sent is treated as failed and, for an acquire, abandoned. The
// portable lease's ValidUntil is the portable layer's send time plus the
// same TTL − 1% − 2 ms (Options.DriftFactor's default), measured from a
// moment no later than the driver's, so the lease a caller gets is never
// believed valid longer than the primaries keep it, under clock-rate drift
// of at most 1% between client and primaries. A larger
// Options.DriftFactor shortens ValidUntil further. Primaries are given at
// least one second to answer, whatever the TTL: a grant that comes later
// than the validity is refused (ErrNotAcquired, so a blocked Acquire
// retries), while a primary that does not answer at all counts as
// unavailable.
//
// # Fences
//
// Every primary keeps a fence counter per lock. Before a lease is
// returned, a majority W of the primaries that granted it each returned a
// counter no higher than the lease's fence and store at least the fence,
// written while our token held the lock there (see # Algorithm).
//
// Why that orders any two granted leases A and B without trusting a clock:
// A's W and B's W are both majorities, so they share a primary x. On x,
// A's token and B's token held the lock at different times (SET NX lets
// one key exist at a time); say A's came first. A's fence was stored on x
// while A's token held the lock there, so before A's key left x, so before
// B's SET NX succeeded on x — and B's acquire script read x's counter, at
// least A's fence, in the same atomic step, and returned at least that
// plus one. x is in B's W, so B's fence is at least what x returned:
// above A's. So any two leases that both reached their write-back have
// different fences, ordered as they held the lock on the primaries they
// share; and a lease acquired after an earlier one was returned always
// has the higher fence. This holds even when Redlock's mutual exclusion
// does not: a paused client, a slow network or a clock jump can make two
// leases overlap, but the later one's fence is higher, so a resource that
// checks fences (package guard) rejects the stale holder's writes.
// TestFenceQuorumIntersection checks it on real primaries, with a
// different majority granting each round and write-backs forced by
// diverging counters; TestFenceConcurrentGrantsDistinct with racing
// clients and a guarded counter.
//
// The proof needs x to keep its counter. A primary that restarts empty
// (or from an old RDB snapshot) lost it: then the time floor in the
// acquire script takes over — B's fence is at least x's server time in µs,
// which is above every fence issued before the restart as long as x's
// clock is not behind the other primaries' by more than the restart took
// (fences are issued far slower than one per µs). A primary without a
// counter takes the full µs as its floor, not the millisecond it usually
// truncates to, so that this holds even when the counter was lost within
// the millisecond of the last grant (TestFenceRisesAfterDropFenceState). Capabilities therefore
// declare FenceTimeFloored, the redis backend's guarantee; with every
// primary durable (appendonly yes, appendfsync always) the order is strict
// and needs no clock at all. Fences are about 1.8e15 (µs since 1970): they
// fit an int64 and are exact as JSON numbers.
//
// # Rolling restarts: what Redlock itself does not survive
//
// Redlock's safety assumes a primary that restarts keeps its locks
// (persistence with fsync) or stays down for a TTL before rejoining. If
// the primaries holding a lease are restarted empty one after another,
// faster than the TTL, a second client can be granted the lock by the
// fresh primaries while the first still believes it holds it: mutual
// exclusion breaks (TestFaultRollingEmptyRestart does this and detects the
// overlap). The first holder's next renewal finds fewer than Q primaries
// holding its token and reports ErrLeaseLost, but until then both hold.
// The fences still order them — the second lease's fence is above the
// first's, from the surviving counters or the time floor — so with
// claim-first fencing the lost-update experiment run through such restarts
// loses nothing. Run Redis with appendfsync always, or keep a restarted
// primary out for a TTL, to keep the lock itself exclusive.
//
// # Keys and redsync interop
//
// For a lock whose store key is K (the name, after Options.Prefix), on
// every primary:
//
//   - Lock key K, exactly as named, holding the owner token (32 hex
//     characters, new for every grant) with a PX expiry: redsync's layout
//     (and redis-py's, and every Redlock client's), so a redsync Mutex and
//     a fencelock Redlock lock on the same name and primaries exclude each
//     other both ways; redsync's release and extend are owner-checked like
//     ours. A key without an expiry is never taken over.
//   - Fence key K "\xff:fence" (K, the byte 0xFF, ":fence"): the
//     primary's counter as a decimal integer, no TTL, never deleted.
//   - Void key K "\xff:void:" token, only for an abandoned attempt whose
//     acquire reply never came; it expires after 5 minutes.
//   - Release channel K "\xff:released": Release PUBLISHes K on it.
//   - On the lead primary (the first one given) only, the queue of blocked
//     Acquires: K "\xff:queue", a sorted set of waiter ids scored by
//     arrival order (0: the waiter the lead granted), and K
//     "\xff:queue:deadlines", a hash of each waiter's deadline (server
//     ms); both expire 500 ms after the last waiter's last attempt (see
//     # Waiting).
//
// 0xFF never occurs in UTF-8, and lock keys must be valid UTF-8, so no
// lock key can be another lock's fence, void key or channel.
//
// # Waiting
//
// A blocked Acquire is woken by the release notices (Capabilities.Wait is
// WaitNotify). The Client keeps one pub/sub connection per primary, shared
// by all its waiters, subscribed to the channels of the locks they wait
// for (a channel stays subscribed for 2 s after its last waiter leaves). A
// waiter subscribes on every primary and waits until a majority confirm;
// then, unless a majority of those subscriptions were already confirmed
// when its failed attempt began and have carried no notice since, it
// checks the lock keys, so a release between its attempt and its
// subscription is not missed (a release frees a majority, which meets the
// confirmed one). Expiry publishes nothing, nor does redsync: a waiter
// also wakes when enough of the holder's keys run out to free a majority,
// by the PTTLs the primaries returned to its refused attempt (for an
// ordered attempt, the lead's key, or the place ahead of it in the lead's
// queue), and a jittered backoff (2 ms doubling to 100 ms, fencelock's
// default; Options.Backoff is not used) bounds every wait. A dead or
// frozen primary is not needed to wait.
//
// Capabilities declare ReleaseWake and ExpiryWake of 100 ms: a waiter is
// granted about a round trip after a Release (the notice) or after an
// abandoned holder's keys run out (the PTTL), however long its Client's
// Options.Backoff and however often it waited before; the bounds leave
// room for a busy machine. TestExpiryWakesWaiterBehindQueuedHolder and
// the conformance checks ExpiryWakesWaiter, ReleaseWakesDeafBackoff and
// PartitionLiveness hold the backend to them.
//
// Blocked Acquires of different Clients queue on the lead primary (the
// first one given to New or in the URL), in the order they first found
// the lock held there. A blocked Acquire's retry is ordered: it asks the
// lead first, and the lead grants only the first waiter in its queue
// (waiters behind it are refused at once, holding nothing); only once the
// lead granted does the waiter ask the other primaries. So the waiters
// woken by a release do not split the primaries' votes (each taking a few,
// none a majority, all abandoning and backing off, which is what makes
// plain Redlock crawl and starve waiters under contention), and the lock
// goes round the waiting Clients in arrival order. This only orders the
// requests: a grant still needs a majority within the validity, and the
// fence and every other guarantee are as above. When the lead fails, or
// has not answered within min(25 ms, validity/4), the other primaries are
// asked at once and the lead's reply counts like theirs.
//
// A waiter the lead granted keeps the head of the queue (nobody passes it
// if its attempt then fails elsewhere: the abandon keeps its place) until
// its lease's release takes it out, in the script that deletes the lock
// key there, or until its lock key there expires, or 500 ms after the
// grant if that comes first: a holder that stops renewing holds the queue
// up no longer than its lock. A waiter keeps its place for 500 ms after
// each of its attempts (every live waiter asks again well within that:
// each wait is bounded by 100 ms); one that gives up takes it out, and
// one that died holds the queue up for at most 500 ms. The first attempt of a blocked Acquire is a plain
// fan-out, as TryAcquire is (so an uncontended Acquire costs one round
// trip; the lead still queues it if the lock is held there), unless this
// Client's previous Acquire of the lock had to wait; and the first waiter
// in line makes a plain attempt after a wait that saw no notice, in case
// the lead alone keeps a stale key while a majority is free. TryAcquire
// ignores the queue.
//
// The blocked Acquires of one Client on one lock queue up locally in
// arrival order, and only the first makes attempts, so each Client puts
// one contender per lock on the primaries. When a lease of the Client is
// released and another of its Acquires waits, that one is told at once
// rather than through the notices (a local hand-off); its attempt is
// ordered or plain by the rules above, so it does not pass other Clients'
// waiters queued on the lead. After 3 such hand-offs in a row the next
// one waits for the notices like the others. Capabilities.FIFO stays
// false: the order is kept only while the lead primary answers, and
// TryAcquire and an Acquire's first, plain attempt are not queued.
//
// # Timeouts
//
// Pass go-redis clients with ContextTimeoutEnabled (clients opened from a
// URL have it); every call to a primary also carries its own deadline (the
// validity of the TTL, at least one second, for an acquire; the ctx's
// deadline or 2 s for a release), because go-redis ends a call in flight
// at a deadline, not at a cancellation. A call that goes on after its
// operation was decided finishes in the background. An unreachable
// majority yields errors wrapping fencelock.ErrUnavailable; a ctx that ends
// mid-call yields an error wrapping ctx.Err(), after the attempt was
// abandoned.
//
// # Admin
//
// The backend implements driver.Admin, so `fencelock conformance --url
// redlock://...` runs every check: Expire deletes the lock key on every
// primary; KillSessions CLIENT KILLs this Client's connections (found by
// their ClientName) and cuts off the leases granted before it: their
// renewals and releases fail, as across a partition, and the primaries
// drop them when their TTL runs out. It also implements driver.FenceAdmin
// (StoredFence: the largest counter that a majority of primaries hold at
// least; DropFenceState: deletes the fence key on every primary) and
// driver.QuorumAdmin (Nodes; RaiseFence: raises one primary's counter
// alone), with which the conformance suite checks the time floor and the
// fence write-back across diverged primaries.
//
// # Labels and Inspect
//
// Each granting primary stores the label in <lock key>\xff:label:<token>
// as "<version> <label>" (the lock key keeps the bare token, as redsync
// writes it), in the acquire script (version 0), expiring and renewed with
// the lock; SetLabel writes the next version on a majority, never over a
// newer one. Inspect is a majority read: the lock is held when one token
// holds it on a majority of primaries, with that token's newest label
// among them (any two majorities share a primary) and, as the
// remaining time, the majority-th longest PTTL. The fence is the acquiring
// client's quorum decision, stored as such on no primary, so Inspect does
// not report it; nor a waiter count.
package redlock

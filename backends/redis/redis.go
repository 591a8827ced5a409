package redis

// Operations (internals; the package doc in doc.go has what users need).
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
//     if the line held only dead waiters, see Waiting atop waiter.go). Otherwise
//     ErrLeaseLost; another holder's lock is never touched. With nobody in
//     line it costs one MGET (lock and fence keys), an LPOP of the line and
//     the DEL; a hand-off, the MGET, the LPOP, GETDEL of the waiter's
//     liveness key, the SET of K, TIME, the fence's SET and the PUBLISH of
//     the grant.
//   - Extend (renewal): PEXPIRE K only if it holds our token, else
//     ErrLeaseLost.
//
// TTLs are rounded up to whole milliseconds; the minimum is minTTL. Expiry
// is decided by the server's clock (Capabilities.TimeAuthority).
//
// Fences (internals; the package doc in doc.go has what users need).
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
// Failover: what the lock does not survive (internals; the package doc in doc.go has what users need).
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
// Redis Cluster failover (internals; the package doc in doc.go has what users need).
//
// go-redis reloads its slot map on MOVED replies and every
// ClusterStateReloadInterval (60s by default), not when a primary stops
// answering. The backend asks it to reload whenever a cluster call fails
// to reach a node, so acquiring works again as soon as a replica is
// promoted (about NodeTimeout plus the election), not a minute later.
//
// Timeouts (internals; the package doc in doc.go has what users need).
//
// Pass a go-redis client with ContextTimeoutEnabled (clients opened from a
// URL have it): then the ctx of Acquire and the lease's validity deadline
// bound every call. An unreachable or unresponsive server yields errors
// wrapping fencelock.ErrUnavailable; a ctx that ends mid-call yields an
// error wrapping ctx.Err().

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/localq"
	"github.com/fencelock/fencelock/internal/redisx"
)

var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed release.lua
	releaseLua string
	//go:embed extend.lua
	extendLua string
	//go:embed abandon.lua
	abandonLua string
	//go:embed grant.lua
	grantLua string // the fence and waiter-queue functions the others share
	//go:embed label.lua
	labelLua string
	//go:embed inspect.lua
	inspectLua string

	acquireScript = goredis.NewScript(withGrant(acquireLua))
	releaseScript = goredis.NewScript(withGrant(releaseLua))

	acquireLuaScript = newScript(acquireScript, withGrant(acquireLua), 3)
	releaseLuaScript = newScript(releaseScript, withGrant(releaseLua), 3)
	extendScript     = goredis.NewScript(extendLua)
	abandonScript    = goredis.NewScript(withGrant(abandonLua))
	labelScript      = goredis.NewScript(labelLua)
	inspectScript    = goredis.NewScript(inspectLua)
)

// withGrant puts grant.lua where script marks it, after its common path:
// Lua defines a script's local functions each time it runs, so a path
// that returns before them does not pay for them.
func withGrant(script string) string {
	const mark = "--[[grant.lua]]\n"
	if !strings.Contains(script, mark) {
		panic("redis: a script lacks its " + mark[:len(mark)-1] + " line")
	}
	return strings.Replace(script, mark, grantLua, 1)
}

// minTTL is the shortest lease TTL the backend accepts. Redis itself keeps
// millisecond expiries exactly (an expired key is gone to every command that
// touches it), but the portable lease ends locally 2 ms + 1% before its TTL
// and renews at TTL/3, so below 10 ms one scheduling hiccup or network round
// trip under load costs the lease. 10 ms is the floor where the local
// validity window (about 7.9 ms) still spans several loopback round trips.
const minTTL = 10 * time.Millisecond

// cleanupTimeout bounds the abandon script TryAcquire runs, on a detached
// context, when it cannot tell whether its acquire script ran. It is also
// capped by the TTL: after the TTL the lock frees itself.
const cleanupTimeout = 2 * time.Second

// voidLifetime is how long an abandoned attempt's token stays void: an
// acquire request delayed longer than this (in a server stalled for
// minutes) can still grant a lock nobody holds, which then expires with its
// TTL.
const voidLifetime = 5 * time.Minute

var capabilities = driver.Capabilities{
	Backend:        "redis",
	Fence:          driver.FenceTimeFloored,
	FenceSource:    "max(stored + 1, server TIME in µs), in the same Lua script as SET NX PX; key {<lock key>}:fence, no TTL, never deleted",
	MinTTL:         minTTL,
	TTLGranularity: time.Millisecond,
	TimeAuthority:  driver.TimeServer,
	Wait:           driver.WaitQueue, // waiters queue on the server; a release hands over (see doc.go)
	FIFO:           false,
	NodeLoss:       driver.NodeLossUnsafe,
	// A release hands the lock to the head of the line and publishes the
	// grant; an abandoned lock's expiry is found by the waiters' timer at
	// its PTTL. Both are one or two round trips (measured p50 well under
	// 1 ms on loopback); the bounds leave room for a busy machine.
	ReleaseWake: 100 * time.Millisecond,
	ExpiryWake:  100 * time.Millisecond,
	// The lock key keeps the bare token (redis-py, redsync); the label and
	// fence live beside it in <base>:label:<token>, expiring with the lock.
	// The waiter line may hold stale entries: no waiter count.
	Inspect: driver.InspectCaps{
		Supported: true, Label: true, Fence: true, Remaining: true, Relabel: true,
		LabelWhere: "key {<lock key>}:label:<token> (\"<fence> <label>\"), beside the lock key, which keeps the bare token; a redis-py/redsync holder reads as held with no label",
	},
}

// Config configures the redis backend beyond fencelock.Options. It has no
// settings yet (key layout and timeouts are the go-redis client's and
// fencelock.Options'); nil is the default. It keeps New in the shape every
// backend's New has.
type Config struct{}

// New returns a Client that keeps its locks in Redis through client: a
// *goredis.Client for one server, a *goredis.ClusterClient for Redis Cluster
// (or a failover client). cfg and opts may be nil. New does no I/O; a nil
// client is an error matching fencelock.ErrInvalid.
//
// The Client does not own client: Client.Close stops the Client's own
// pub/sub subscription and goroutines but leaves client open for the caller
// to close after it. Set ContextTimeoutEnabled in the go-redis options:
// without it go-redis bounds a call by its ReadTimeout (3s by default), not
// by the caller's ctx, so a cancelled Acquire or a renewal past the lease's
// validity deadline waits for that timeout before it returns.
func New(client goredis.UniversalClient, cfg *Config, opts *fencelock.Options) (*fencelock.Client, error) {
	if client == nil {
		return nil, &fencelock.Error{Op: "open", Backend: capabilities.Backend, Err: fmt.Errorf("%w: redis.New with a nil go-redis client", fencelock.ErrInvalid)}
	}
	return fencelock.New(newBackend(client, false), opts), nil
}

// backend is the Redis driver. It implements driver.Backend,
// driver.Blocker (see blocker.go), driver.Aser and driver.Admin.
type backend struct {
	client goredis.UniversalClient
	owns   bool // Close closes client (clients opened from a URL)
	hub    *hub
	lane   *lane                   // one blocked Acquire at a time reads its grant itself (lane.go)
	queue  localq.Queues[struct{}] // this Client's blocked acquires per name (blocker.go)
	live   leaseSet                // held leases, for KillSessions
	boxes  boxes                   // the last TTL and label sent, boxed (script.go)
	keys   keyCache                // the keys of names used lately, boxed (script.go)
}

var (
	_ driver.Backend = (*backend)(nil)
	_ driver.Blocker = (*backend)(nil)
	_ driver.Aser    = (*backend)(nil)
	_ driver.Admin   = (*backend)(nil)
)

func newBackend(client goredis.UniversalClient, owns bool) *backend {
	return &backend{client: client, owns: owns, hub: newHub(client), lane: newLane(client)}
}

func (b *backend) Capabilities() driver.Capabilities { return capabilities }

// TryAcquire runs the acquire script once. When the script may have run but
// its reply was lost (ctx ended, connection broken, server error), it runs
// the abandon script for req.Token on a detached context before returning:
// that releases a grant made under the token and voids the token, so that
// the request, if the server only gets to it later, grants nothing. An
// error thus leaves nothing held; if abandoning fails too, the error also
// wraps ErrIndeterminate.
func (b *backend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	return b.attemptArgs(ctx, b.keyArgs(req.Name), req, 0, "")
}

// attempt runs the acquire script once (see TryAcquire); with live > 0 a
// refused attempt also queues req.Token as a waiter (or keeps its place)
// whose liveness key lasts live, and whose grant is published on the
// lock's channel suffixed ":"+cid (the hub's or the lane's id).
func (b *backend) attempt(ctx context.Context, k keys, req driver.AcquireRequest, live time.Duration, cid string) (driver.Lease, error) {
	return b.attemptArgs(ctx, boxKeys(k), req, live, cid)
}

// attemptArgs is attempt with the keys boxed for the scripts.
func (b *backend) attemptArgs(ctx context.Context, ka *keyArgs, req driver.AcquireRequest, live time.Duration, cid string) (driver.Lease, error) {
	k := ka.k
	sent := time.Now()
	// The lease is made first: its arrays hold the scripts' arguments, so
	// that a grant costs no argument slices of its own, and the release
	// script reuses the boxed keys and token (see script.run).
	l := &lease{b: b, k: k, token: req.Token}
	a := &l.acq
	a[3], a[4], a[5] = ka.lock, ka.fence, ka.queue
	a[6], a[7], a[8], a[9], a[10], a[11] = req.Token, b.boxes.millis(req.TTL), millis(live), ka.base, cid, b.boxes.label(req.Label)
	v, err := acquireLuaScript.run(ctx, b.client, a[:])
	res, _ := v.([]any)
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("acquire script returned %v, want {fence, pttl}", v)
	}
	var fence, pttl int64
	if err == nil {
		var ok1, ok2 bool
		fence, ok1 = res[0].(int64)
		pttl, ok2 = res[1].(int64)
		if !ok1 || !ok2 {
			err = fmt.Errorf("acquire script returned %v, want {fence, pttl}", res)
		}
	}
	if err != nil {
		cause := b.fail(ctx, "acquire", err)
		if redisx.NotSent(err) {
			return nil, cause
		}
		return nil, b.cleanup(ctx, k, req, cause)
	}
	if fence <= 0 {
		return nil, notAcquired(time.Duration(pttl) * time.Millisecond)
	}
	r := &l.rel
	r[3], r[4], r[5], r[6], r[7], r[8] = a[3], a[4], a[5], a[6], ka.channel, a[9]
	b.grant(l, req, driver.Fence(fence), sent)
	return l, nil
}

// newLease records a grant of req under fence whose TTL started no earlier
// than sent.
func (b *backend) newLease(k keys, req driver.AcquireRequest, fence driver.Fence, sent time.Time) *lease {
	l := &lease{b: b, k: k, token: req.Token}
	r := &l.rel
	r[3], r[4], r[5], r[6], r[7], r[8] = k.lock, k.fence, k.queue, req.Token, k.channel, k.base
	b.grant(l, req, fence, sent)
	return l
}

func (b *backend) grant(l *lease, req driver.AcquireRequest, fence driver.Fence, sent time.Time) {
	l.fence = fence
	l.until.Store(sent.Add(req.TTL).UnixNano())
	b.live.add(l)
}

// fail classifies err (see classify). When a Redis Cluster node could not
// be reached or said the cluster cannot serve, it also asks go-redis to
// reload its slot map (asynchronous, deduplicated): go-redis otherwise
// does so only on MOVED replies or every ClusterStateReloadInterval (60s
// by default), so after a failover it would keep sending a dead primary's
// slots to the dead primary for up to a minute.
func (b *backend) fail(ctx context.Context, op string, err error) error {
	e := classify(ctx, op, err)
	if cc, ok := b.client.(*goredis.ClusterClient); ok && !errors.Is(err, context.Canceled) && !errors.Is(err, goredis.ErrClosed) &&
		(!redisx.IsReply(err) || redisx.UnavailableReply(err)) {
		cc.ReloadState(context.WithoutCancel(ctx))
	}
	return e
}

// cleanup abandons an acquire attempt whose outcome is unknown, and returns
// cause (or cause plus ErrIndeterminate).
func (b *backend) cleanup(ctx context.Context, k keys, req driver.AcquireRequest, cause error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(req.TTL, cleanupTimeout))
	defer cancel()
	err := abandonScript.Run(cctx, b.client, []string{k.lock, k.void(req.Token), k.fence, k.queue, k.wait(req.Token)},
		req.Token, k.channel, voidLifetime.Milliseconds(), k.base).Err()
	if err != nil {
		return fmt.Errorf("%w: %w; the lock may stay held under this attempt's token until its TTL of %v ends (removing it failed: %v)",
			driver.ErrIndeterminate, cause, req.TTL, err)
	}
	return cause
}

// refused is a refusal: ErrNotAcquired with the holder's PTTL (the acquire
// script's second value: -1 the key has no expiry, -3 this attempt was
// abandoned, -4 the lock is free but a live waiter is first in line).
type refused struct{ pttl time.Duration }

func (r *refused) Unwrap() error { return driver.ErrNotAcquired }

func (r *refused) Error() string {
	switch r.pttl {
	case -1 * time.Millisecond:
		return driver.ErrNotAcquired.Error() + ": the Redis key has no expiry, so its holder is not a lease (a redis-py Lock with timeout=None?) and it never frees itself; fencelock never takes such a key over: delete it by hand if its owner is gone"
	case -3 * time.Millisecond:
		return driver.ErrNotAcquired.Error() + ": this attempt was abandoned after its reply was lost; try again"
	case queuedFirst:
		return driver.ErrNotAcquired.Error() + ": the lock is free, but blocked Acquire calls queued for it first (fair hand-off: the next release or expiry grants it to them)"
	}
	return fmt.Sprintf("%v (the holder's lease expires in %v unless renewed)", driver.ErrNotAcquired, r.pttl)
}

// queuedFirst is the acquire script's -4: the lock is free but a live
// waiter is first in line.
const queuedFirst = -4 * time.Millisecond

// notAcquired explains a refusal; pttl is the acquire script's second value.
func notAcquired(pttl time.Duration) error { return &refused{pttl} }

// As sets *target to the go-redis client for target types
// *goredis.UniversalClient, **goredis.Client and **goredis.ClusterClient.
func (b *backend) As(target any) bool {
	switch t := target.(type) {
	case *goredis.UniversalClient:
		*t = b.client
		return true
	case **goredis.Client:
		c, ok := b.client.(*goredis.Client)
		if ok {
			*t = c
		}
		return ok
	case **goredis.ClusterClient:
		c, ok := b.client.(*goredis.ClusterClient)
		if ok {
			*t = c
		}
		return ok
	}
	return false
}

// Close stops the pub/sub subscription and its goroutines, and closes the
// go-redis client if the backend opened it (from a URL).
func (b *backend) Close() error {
	b.hub.close()
	b.lane.close()
	if b.owns {
		if err := b.client.Close(); err != nil {
			return fmt.Errorf("redis close: %w", err)
		}
	}
	return nil
}

// lease is a granted lock: the lock key holds token.
type lease struct {
	b     *backend
	k     keys
	token string
	fence driver.Fence
	until atomic.Int64 // UnixNano after which the store has surely dropped it unrenewed
	// acq and rel are the acquire and release scripts' arguments (see
	// script.run), in the lease so that they cost no allocation of their
	// own; rel reuses acq's boxed keys and token.
	acq [12]any
	rel [9]any
}

// expired reports whether the lease's TTL has surely run out (for pruning
// the live set; a renewal moves it).
func (l *lease) expired() bool { return time.Now().UnixNano() > l.until.Load() }

func (l *lease) Fence() driver.Fence { return l.fence }

// Extend resets the key's expiry to ttl, only while it holds our token.
func (l *lease) Extend(ctx context.Context, ttl time.Duration) error {
	sent := time.Now()
	n, err := extendScript.Run(ctx, l.b.client, []string{l.k.lock, l.k.label(l.token)}, l.token, millis(ttl)).Int64()
	if err != nil {
		return l.b.fail(ctx, "extend", err)
	}
	if n != 1 {
		l.b.live.remove(l)
		return fmt.Errorf("%w: the Redis key no longer holds this lease's token (it expired, or another owner took it)", driver.ErrLeaseLost)
	}
	l.until.Store(sent.Add(ttl).UnixNano())
	return nil
}

// Release deletes the key only while it holds our token and, in the same
// script, hands the lock to the first live waiter in line (see the package
// doc, Waiting; with nobody in line it publishes nothing).
func (l *lease) Release(ctx context.Context) error {
	defer l.b.live.remove(l)
	n, err := l.release(ctx)
	if err != nil {
		return l.b.fail(ctx, "release", err)
	}
	if n != 1 {
		return fmt.Errorf("%w: the Redis key no longer held this lease's token (it expired, or another owner took it)", driver.ErrLeaseLost)
	}
	return nil
}

// release runs the release script: 1 released, 0 not ours.
func (l *lease) release(ctx context.Context) (int64, error) {
	res, err := releaseLuaScript.run(ctx, l.b.client, l.rel[:])
	if err != nil {
		return 0, err
	}
	n, ok := res.(int64)
	if !ok {
		return 0, fmt.Errorf("release script returned %v, want 0 or 1", res)
	}
	return n, nil
}

// millis rounds d up to whole milliseconds (PX): the store keeps the lock
// at least as long as the portable layer believes it is held.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

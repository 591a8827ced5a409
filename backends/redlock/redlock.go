package redlock

// Algorithm (internals; the package doc in doc.go has what users need).
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
//     (see Fences, below), so they disagree and the write-back is needed.
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
//     not hold our token. Another holder's lock is never touched. A
//     contended lease's release asks the lead first and, when a waiter is
//     queued there, hands the lock to it: the waiter's acquire takes over
//     the keys holding the released token on the other primaries (see
//     Hand-off in lease.go).
//
// One Client makes at most one acquire attempt at a time per lock (a
// concurrent TryAcquire gets ErrNotAcquired at once): two attempts from
// one place would only split the primaries' votes, so that neither gets a
// majority. Its blocked Acquires (driver.Blocker) queue up locally in
// arrival order and only the first makes attempts; see Waiting, atop waiter.go.
//
// Validity and the drift factor (internals; the package doc in doc.go has what users need).
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
// Fences (internals; the package doc in doc.go has what users need).
//
// Every primary keeps a fence counter per lock. Before a lease is
// returned, a majority W of the primaries that granted it each returned a
// counter no higher than the lease's fence and store at least the fence,
// written while our token held the lock there (see Algorithm, above).
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
// Rolling restarts: what Redlock itself does not survive (internals; the package doc in doc.go has what users need).
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

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/localq"
)

var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed writeback.lua
	writebackLua string
	//go:embed release.lua
	releaseLua string
	//go:embed extend.lua
	extendLua string
	//go:embed raise.lua
	raiseLua string
	//go:embed drop.lua
	dropLua string

	acquireScript   = goredis.NewScript(acquireLua)
	writebackScript = goredis.NewScript(writebackLua)
	releaseScript   = goredis.NewScript(releaseLua)
	extendScript    = goredis.NewScript(extendLua)
	raiseScript     = goredis.NewScript(raiseLua)
	dropScript      = goredis.NewScript(dropLua)
)

// minTTL is the shortest lease TTL the backend accepts. An acquire needs a
// majority of primaries to answer within the TTL's validity (TTL − 1% −
// 2ms), in one or two parallel round trips; below 20ms a loaded machine
// misses that window often enough to make locks flap.
const minTTL = 20 * time.Millisecond

// DriftFactor is the share of the TTL, plus DriftMin, that an acquire or
// renewal must leave unused: a majority that answers later than TTL −
// DriftFactor×TTL − DriftMin after the request was sent grants nothing
// (Redlock's clock-drift allowance; the same figures as fencelock's default
// Options.DriftFactor, so the lease's local deadline and this check agree).
const (
	DriftFactor = 0.01
	DriftMin    = 2 * time.Millisecond
)

// cleanupTimeout bounds the release of a failed attempt's grants (it is
// also capped by the TTL: after the TTL the keys free themselves), and a
// Release whose ctx has no deadline.
const cleanupTimeout = 2 * time.Second

// answerWait is the least time an acquire gives the primaries to answer
// (see TryAcquire).
const answerWait = time.Second

// closeGrace is how long Close lets calls in flight finish before it
// closes the go-redis clients under them.
const closeGrace = time.Second

// abandonGraceMin is the least abandon waits, once a majority is known
// free, for the other primaries' answers.
const abandonGraceMin = 20 * time.Millisecond

// voidLifetime is how long an abandoned attempt's token stays void on a
// primary that never answered the acquire request.
const voidLifetime = 5 * time.Minute

var capabilities = driver.Capabilities{
	Backend:        "redlock",
	Fence:          driver.FenceTimeFloored,
	FenceSource:    "quorum counter: the majority-th smallest of the granting primaries' counters (each max(stored+1, server TIME in µs, truncated to the ms while a counter is stored), bumped in the script that SETs NX PX), stored on a majority before the lease is returned; key <lock key>\\xff:fence on each primary, never deleted",
	MinTTL:         minTTL,
	TTLGranularity: time.Millisecond,
	TimeAuthority:  driver.TimeServer,
	Wait:           driver.WaitNotify,
	FIFO:           false,
	NodeLoss:       driver.NodeLossQuorum,
	ReleaseWake:    100 * time.Millisecond,
	ExpiryWake:     100 * time.Millisecond,
	// A majority read (inspect.lua on every primary): held when one token
	// holds a majority; its label from the key beside the lock key; the
	// majority-th longest PTTL. The fence is the acquiring client's
	// quorum decision, stored on no primary as such: not reported.
	Inspect: driver.InspectCaps{
		Supported: true, Label: true, Remaining: true, Relabel: true,
		LabelWhere: "key <lock key>\\xff:label:<token> on each primary, value \"<version> <label>\", beside the lock key, which keeps the bare token (redsync)",
	},
}

var errClosed = fmt.Errorf("redlock: %w", driver.ErrClosed)

// Config configures the redlock backend beyond fencelock.Options. It has no
// settings yet (the drift allowance is DriftFactor and DriftMin); nil is the
// default. It keeps New in the shape every backend's New has.
type Config struct{}

// New returns a Client that keeps its locks on the independent Redis
// primaries reached by clients, one *goredis.Client per primary (not
// replicas of each other, not a Redis Cluster). cfg and opts may be nil.
// New does no I/O. It returns an error matching fencelock.ErrInvalid if
// clients holds a nil client, fewer than 3, or an even number: a majority
// of an odd number of primaries tolerates the most failures.
//
// The Client does not own the go-redis clients: Client.Close stops its own
// pub/sub subscriptions and goroutines but leaves them open for the caller
// to close after it. Set ContextTimeoutEnabled in their options (see the
// package doc's # Timeouts), and ClientName if the conformance suite's
// KillSessions hook should find their connections.
func New(clients []*goredis.Client, cfg *Config, opts *fencelock.Options) (*fencelock.Client, error) {
	err := checkCount(len(clients))
	if err == nil && slices.Contains(clients, nil) {
		err = fmt.Errorf("%w: redlock.New with a nil go-redis client", driver.ErrInvalid)
	}
	if err != nil {
		return nil, &fencelock.Error{Op: "open", Backend: capabilities.Backend, Err: err}
	}
	return fencelock.New(newBackend(clients, false), opts), nil
}

func checkCount(n int) error {
	if n < 3 || n%2 == 0 {
		return fmt.Errorf("%w: %d primaries: Redlock needs an odd number, at least 3 (5 is usual), of independent primaries", driver.ErrInvalid, n)
	}
	return nil
}

// node is one primary.
type node struct {
	addr    string
	c       *goredis.Client
	hub     *hub
	workers *workers // run the fan-outs' calls to this primary (see fanInto)
}

// backend is the Redlock driver. It implements driver.Backend,
// driver.Blocker (blocker.go), driver.Admin (with driver.FenceAdmin and
// driver.QuorumAdmin) and driver.Aser.
type backend struct {
	nodes  []*node
	quorum int
	owns   bool          // Close closes the go-redis clients (opened from a URL)
	epoch  atomic.Uint64 // bumped by KillSessions: older leases are cut off

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	bg     sync.WaitGroup // calls in flight (see fan)

	mu      sync.Mutex
	closed  bool
	gates   map[string]*gate       // lock key → this client's attempt in flight
	queues  localq.Queues[*ticket] // lock key → this client's blocked Acquires, in order
	streaks map[string]int         // lock key → local hand-offs in a row (see handOff)
	rivals  map[string]bool        // lock key → this Client's last blocked Acquire of it had to wait (see Acquire)
	snaps   map[string][]chanSnap  // lock key → the hubs' view when the last attempt began (see Wait)
	id      string                 // this backend's notice message for its abandons (see hub.self)
	waitID  string                 // prefix of this Client's waiter ids, and of its own release channels (see keys.own)
	waitSeq atomic.Uint64          // numbers this Client's waiter ids
	// leadSlow: the lead primary's last reply to an acquire failed or
	// came after an attempt stopped waiting for it (see leadWait).
	leadSlow atomic.Bool
}

// gate marks an acquire attempt in flight; done is closed when it ends.
//
// One Client makes at most one attempt at a time per lock: a second one
// would only split the primaries' votes with the first (neither gets a
// majority, both abandon, both retry), which is what makes Redlock crawl
// under contention. A concurrent TryAcquire reports ErrNotAcquired at
// once, and a waiting Acquire's Wait waits for the attempt to end.
type gate struct {
	done chan struct{}
	won  bool // set before done is closed: the attempt was granted
}

// enter registers an attempt on key, or returns nil if one is in flight.
func (b *backend) enter(key string) *gate {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gates[key] != nil {
		return nil
	}
	g := &gate{done: make(chan struct{})}
	b.gates[key] = g
	return g
}

func (b *backend) exit(key string, g *gate, won bool) {
	b.mu.Lock()
	delete(b.gates, key)
	if won {
		delete(b.snaps, key) // no Wait follows a grant
	}
	b.mu.Unlock()
	g.won = won
	close(g.done)
}

// inFlight returns the gate of an attempt in flight on key, or nil.
func (b *backend) inFlight(key string) *gate {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gates[key]
}

var (
	_ driver.Backend     = (*backend)(nil)
	_ driver.Admin       = (*backend)(nil)
	_ driver.FenceAdmin  = (*backend)(nil)
	_ driver.QuorumAdmin = (*backend)(nil)
	_ driver.Aser        = (*backend)(nil)
)

func newBackend(clients []*goredis.Client, owns bool) *backend {
	b := &backend{quorum: len(clients)/2 + 1, owns: owns, gates: map[string]*gate{}, streaks: map[string]int{}, rivals: map[string]bool{}, snaps: map[string][]chanSnap{}}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.id = "fencelock-abandon:" + driver.NewToken()
	b.waitID = driver.NewToken()
	for _, c := range clients {
		b.nodes = append(b.nodes, &node{addr: c.Options().Addr, c: c, hub: newHub(c, b.id), workers: newWorkers(c.Options().PoolSize)})
	}
	return b
}

func (b *backend) Capabilities() driver.Capabilities { return capabilities }

// drift is the part of ttl an acquire or renewal must leave unused.
func drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*DriftFactor) + DriftMin
}

// TryAcquire runs the acquire script on every primary at once and decides
// as soon as the replies allow: granted by a majority, or refused or
// unanswered by so many that no majority can grant. See Algorithm
// (atop this file) for the fence and the write-back. A failed attempt
// releases and voids its token on every primary that granted or did not
// answer before it returns (see abandon).
func (b *backend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, _, err := b.try(ctx, req, "", plain, "")
	return l, err
}

// lead is the primary a blocked Acquire's retry asks first (see try).
const lead = 0

// queueKeep is how long the lead primary keeps a queued Acquire's place
// after its last attempt (see acquire.lua): an Acquire that ended without
// taking its place out (its process died) holds up the queue that long. A
// live waiter retries well within it (every wait is bounded by 100ms).
const queueKeep = 500 * time.Millisecond

// errBehind is an ordered attempt's refusal by the lead primary because
// earlier waiters are queued there.
var errBehind = errors.New("queues earlier waiters (a blocked Acquire's retry asks it first)")

// errQueued is a plain attempt's refusal by the lead primary, which held
// the lock and queued the blocked Acquire.
var errQueued = errors.New("holds the lock too and queued this waiter")

// errLeadHeld is an ordered attempt's refusal by the lead primary because
// the lock is held there.
var errLeadHeld = errors.New("holds the lock for another owner (a blocked Acquire's retry asks it first)")

// attemptMode is how an acquire attempt asks the primaries (see try).
type attemptMode int

const (
	plain   attemptMode = iota // all at once; the lead's queue is not consulted
	ordered                    // the lead first, the others once it granted
	// named: all at once, the lead's queue consulted as in an ordered
	// attempt, and the lead's refusal ends the attempt (the others'
	// grants are abandoned). The retry of a waiter that the lead's
	// release notice named: it is first in the lead's queue, so the lead
	// grants it, and asking everyone at once saves a round trip.
	named
)

// How long an ordered or named attempt waits for the lead primary's
// answer before it goes on without it (see try), at most validity/4:
// leadWait while the lead has been answering, so that a lead merely slowed
// by a busy machine keeps the queue's order; maxLeadWait once it failed
// to answer in time or with an error (see backend.leadSlow), so that a
// frozen or dead lead costs each attempt little.
const (
	leadWait    = 250 * time.Millisecond
	maxLeadWait = 25 * time.Millisecond
)

// fenceOf picks the fence from the grants: the q-th smallest counter
// returned. It also returns how many grants returned exactly that value
// (they store it already) and the primaries that returned less (candidates
// for the write-back).
func fenceOf(grants []reply, q int) (fence int64, stored int, behind []int) {
	vs := make([]int64, len(grants))
	for i, g := range grants {
		vs[i] = g.b
	}
	slices.Sort(vs)
	fence = vs[q-1]
	for _, g := range grants {
		switch {
		case g.b == fence:
			stored++
		case g.b < fence:
			behind = append(behind, g.i)
		}
	}
	return fence, stored, behind
}

// abandon undoes a failed attempt and returns cause. On every primary that
// may hold the attempt's token (it granted, or its reply never came) it
// releases the lock if it holds the token and voids the token, so that an
// acquire request still in flight grants nothing when it lands.
//
// It returns once every primary that may hold the token has answered, or
// after min(TTL, 2s) for those that do not answer (a frozen primary); so
// on a responsive store nothing is left held when it returns. If a
// majority cannot be confirmed free, the error also wraps ErrIndeterminate:
// the token may hold a majority until its TTL ends.
//
// The abandon of a blocked Acquire's attempt (waiter is its id) keeps the
// waiter's place in the lead primary's queue for queueKeep: it asks again
// within that.
func (b *backend) abandon(req driver.AcquireRequest, waiter string, k keys, at *attempt, cause error) error {
	n, q := len(b.nodes), b.quorum
	var idx []int
	free, granted := 0, 0
	wasGranted := make([]bool, n)
	for i := range n {
		switch {
		case at.state(i) == stateGranted:
			wasGranted[i] = true
			granted++
			idx = append(idx, i)
		case at.mayHold(i):
			idx = append(idx, i)
		default:
			free++
		}
	}
	if len(idx) == 0 || b.isClosed() {
		return cause
	}
	replies := b.fan(time.Now().Add(min(req.TTL, cleanupTimeout)), idx, func(ctx context.Context, i int) (int64, int64, error) {
		ks, as := []string{k.lock, k.void(req.Token)}, []any{req.Token, k.channel, voidLifetime.Milliseconds(), b.id}
		if i == lead && waiter != "" {
			ks, as = append(ks, k.queue, k.queueDL), append(as, waiter, queueKeep.Milliseconds())
		}
		v, err := releaseScript.Run(ctx, b.nodes[i].c, ks, as...).Int64()
		return v, 0, err
	})
	var errs []error
	// Wait until every primary that granted has answered and a majority is
	// known free; then, for a short grace, for the others too: a
	// responsive primary answers about as fast as the majority did, and
	// returning while it still holds the token (its acquire landed before
	// the release) would leave the lock held past the call. A frozen
	// primary is not waited for beyond the grace: its release and void are
	// queued and apply when it thaws.
	start := time.Now()
	var grace <-chan time.Time
	startGrace := func() {
		if grace == nil && granted == 0 && free >= q {
			t := time.NewTimer(max(abandonGraceMin, 2*time.Since(start)))
			grace = t.C
		}
	}
	startGrace()
	for got := 0; got < len(idx); got++ {
		var r reply
		select {
		case r = <-replies: // every call ends by its deadline
		case <-grace:
			got = len(idx)
			continue
		}
		if wasGranted[r.i] {
			granted--
		}
		if r.err != nil {
			errs = append(errs, nodeErr(b.nodes[r.i].addr, "abandon", r.err))
		} else {
			free++
		}
		startGrace()
	}
	if free < q {
		return fmt.Errorf("%w: %w; the lock may stay held under this attempt's token until its TTL of %v ends (only %d of %d primaries confirmed free: %v)",
			driver.ErrIndeterminate, cause, req.TTL, free, n, errors.Join(errs...))
	}
	return cause
}

// As sets *target to the go-redis clients, one per primary, for target
// type *[]*goredis.Client.
func (b *backend) As(target any) bool {
	if t, ok := target.(*[]*goredis.Client); ok {
		cs := make([]*goredis.Client, len(b.nodes))
		for i, nd := range b.nodes {
			cs[i] = nd.c
		}
		*t = cs
		return true
	}
	return false
}

func (b *backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// Close stops the pub/sub subscriptions and their goroutines and, if the
// backend opened the go-redis clients (from a URL), closes them and waits
// for calls still in flight (a closed client ends them at once).
func (b *backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.queues.Close()
	b.mu.Unlock()
	b.cancel()
	for _, nd := range b.nodes {
		nd.hub.close()
	}
	if !b.owns {
		go func() { b.bg.Wait(); b.stopWorkers() }()
		return nil
	}
	// Calls still in flight (the background end of a decided fan-out) end
	// within milliseconds on live primaries; one stuck on a frozen primary
	// is ended by closing its client.
	idle := make(chan struct{})
	go func() { b.bg.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-time.After(closeGrace):
	}
	var errs []error
	for _, nd := range b.nodes {
		if err := nd.c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("redlock close %s: %w", nd.addr, err))
		}
	}
	b.bg.Wait()
	b.stopWorkers()
	return errors.Join(errs...)
}

// stopWorkers stops every primary's workers, once b.bg is done after
// Close.
func (b *backend) stopWorkers() {
	for _, nd := range b.nodes {
		nd.workers.stop()
	}
}

// millis rounds d up to whole milliseconds (PX): the store keeps the lock
// at least as long as the portable layer believes it is held.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

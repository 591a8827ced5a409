package dynamodb

// Waiting: a queue in the item (internals; the package doc in doc.go has what users need).
//
// Blocked Acquires (driver.Blocker) wait in line in the item's waitQueue
// and are served in the order they joined it:
//
//   - Join: an Acquire whose first write is refused reads the item and
//     appends its entry with one conditional UpdateItem (list_append, only
//     if the queue has fewer than 16 entries and not this entry already;
//     the condition, size(waitQueue) < 16 AND NOT contains(...), needs the
//     attribute, which every fencelock grant leaves; on an item without
//     it, as the AWS Lock Client writes them, the longer form that also
//     checks that the item exists). An Acquire on a Client whose last read
//     of the item found waiters, or that handed the lock on since (one
//     coming back for a lock it just released), joins at once, without
//     the acquire write the queue would refuse; the join returns the
//     item. While the queue is full, later waiters poll and join when a
//     place frees.
//   - Hand-off: a Release whose lease saw a waiter first in line (the
//     grant that made it returned the item: the first waiter's own take,
//     or a hand-off the waiter read) writes that waiter's ownership
//     instead of marking the item released: SET ownerName, a new version,
//     leaseDuration and label from the waiter's entry, fence = its own + 1
//     (a plain value: the version condition proves the item unchanged),
//     REMOVE waitQueue[0], conditional on our version and owner and on
//     waitQueue[0] being that entry. A refusal reads the item: if the lock
//     is still ours, the first entry changed (the waiter left, refreshed,
//     lapsed): hand off to the new first one (at most 4 writes), or
//     release. A releaser whose lease saw nobody waiting (TryAcquire's
//     grant, a take with nobody behind) releases; a waiter who joined
//     meanwhile takes the lock itself (Take). The waiter learns of the
//     hand-off at its next read (ownerName is "<its Config.Owner>/<its
//     token>"): its lease's validity runs from when it sent the last
//     request whose reply showed the lock not yet its own, which the
//     hand-off write followed; others watch the new version from their
//     first read of it, after the write. Entries carry what the hand-off
//     writes ("<token> <count> <lapse ms> <lease ms> <Config.Owner>
//     <label>"); an entry whose owner and label exceed 64 bytes, or
//     whose Config.Owner has a space or a slash, or one written by an
//     older fencelock ("<token> <count> <lapse ms>"), gets no hand-off:
//     its waiter takes the lock itself. A waiter that dies after joining
//     may be handed the lock: the lock then waits out the lease duration
//     in its entry (watched by the next waiter, who takes it over as in
//     Take) instead of the entry's lapse time. A waiter whose Acquire ends
//     after a hand-off it has not read yet finds it when it leaves, and
//     releases (hands on) the lock.
//   - Take: only the first waiter in line takes the lock, when it is
//     released, gone, or its version watched unchanged for its lease
//     duration, with the acquire write conditional on waitQueue[0] being
//     its entry, which the same write removes (and which returns the
//     item: the queue behind it is whom its release hands off to).
//     Everyone else's acquire write (a later arrival, TryAcquire, the
//     releaser coming back) is refused while anyone waits, even on a
//     released lock: TryAcquire returns ErrNotAcquired saying that
//     waiters queued first. So the releaser cannot re-grab, and a holder
//     that crashed is taken over by the first waiter in line.
//   - Refresh: a waiter rewrites its entry (a higher count) every third
//     of its lapse time, with a write conditional on the entry at its
//     index. The lapse time is the TTL the waiter asked for, at most 10s.
//   - Lapse: an entry is watched like a lease: once a Client has seen the
//     same entry unchanged for its lapse time since its first read of it
//     (local monotonic time; no clocks compared), a blocked Acquire or a
//     TryAcquire of that Client removes it with a write conditional on the
//     entry at its index. A waiter that died thus holds the line up for
//     at most its lapse time after the others first saw its entry (plus a
//     poll), unless it is handed the lock first (Hand-off). Dead waiters
//     seen by the same read lapse together, and a blocked Acquire drops
//     them one write each without waiting between (TryAcquire drops at
//     most one per call). A live waiter that stalled past its lapse finds
//     its entry gone and joins again at the back. A dead waiter with a
//     lapse longer than the holder's lease delays the takeover of an
//     abandoned lock past Lease.StoreTTL, by up to the difference.
//   - Leave: an Acquire that ends without the lock (ctx ended, Client
//     closed, an error) removes its entry before it returns, on a
//     detached context (read, then remove conditional on the entry at its
//     index; a refused removal means another entry moved, so it reads
//     and tries again, up to 32 times: eight waiters leaving at once all
//     get out); a read that shows the lock handed to it releases it. If
//     that fails the entry lapses (or the handed lock expires). The join
//     and the take are sent on a settled context (dynamodb.go): a waiter
//     whose ctx ends while one is on its way waits for its outcome (up
//     to cleanupTimeout) before it leaves. A join abandoned with ctx was
//     still applied by the server, at times after the leave's read,
//     which found no entry: the entry, nobody's, then held the line up
//     for its lapse time, or was handed the lock and held it for its
//     lease (BenchmarkContended's rare "no grants" chunks; see
//     TestLeaveAfterLateJoin).
//
// Waiters read the whole item with a consistent GetItem (no projection:
// see get, in dynamodb.go): after a quarter of the
// time since they last saw the lock change hands or themselves move up in
// line, between 3ms and Config.PollInterval (by default the held item's
// lease duration / 20, between 10ms and 200ms), times their place in line
// from the third on (the first two, who are handed the lock at the next
// release and the one after, wait least), jittered down to half, and no
// later than the watched version's expiry or their next refresh. A lock
// that changes hands often is read often, a long-held one at most every
// PollInterval; a lock handed to a waiter is seen by it within one such
// wait plus a read. Polls are reads, which cost a fifth of a write. The
// portable Backoff is not used.
//
// What a contended grant costs (requests, and DynamoDB's on-demand
// pricing: a write request unit per write of an item up to 1 KB, charged
// whether or not its condition holds; a strongly consistent read of up to
// 4 KB is one read request unit, which costs a fifth of a write unit).
// Entries are about 45 bytes, or about 80 with the hand-off fields and
// the default owner and label: the item stays under 1 KB with up to
// about ten waiters (a write to an item of 1 to 2 KB is two units). With
// eight Clients taking and releasing one lock in a loop
// (BenchmarkContended counts the requests on the wire):
//
//   - fencelock before issue 27: about 4.2 writes and 4 to 6 reads per
//     grant (release; the releaser's acquire write, refused because
//     others wait, and its read; its join; the first waiter's take; the
//     polls), 5 to 5.5 write units' worth; the join's parenthesized
//     condition alone cost dynalite 1.3 ms of CPU to parse, and eight
//     waiters leaving at once could leave entries behind that held the
//     line up for their lapse time.
//   - with the one-poller-per-Client join: about 3.1 writes (release,
//     join, take, a few refreshes) and 2.5 to 3 reads per grant, 3.6 to
//     3.7 write units' worth.
//   - now, with the hand-off: about 2.05 writes (the hand-off, the
//     releaser's join) and 3 to 4 reads (polls; the first two in line
//     poll at 3ms) per grant, 2.7 to 2.9 write units' worth. In the same
//     runs (a loaded 2-core machine, interleaved) grants per second went
//     from 124-151 to 262-311 and CPU per grant fell by a quarter
//     (dynalite) and a fifth (the Clients).
//   - the polls without a ProjectionExpression (issue 27): the same
//     requests per grant and the same units on DynamoDB (a read is
//     billed by the item's size, projected or not), but dynalite parsed
//     the projection on every read, about 150 µs of a read's 400-550 µs
//     of its CPU; polls are most of a contended lock's requests.
//   - the settled join and acquire write (a cancelled waiter or
//     TryAcquire waits for the outcome of a write already on its way):
//     no request more, and none fewer in the common case; what it saves
//     is the ghost entry a join abandoned mid-flight left behind, which
//     cost every other waiter its lapse time of polls (reads, a fifth of
//     a write unit each) and a drop write, and the ghost grant an
//     abandoned acquire write left, which held the lock for its TTL.
//   - the AWS Lock Client protocol (benchpeers' peer): a PutItem and a
//     DeleteItem per grant, 2 write units, plus a refused PutItem (a write
//     unit each) per waiter per retry period; with no queue the releaser
//     takes the lock back 99% of the time.
//
// Capabilities.FIFO is false: the order holds among the first 16 waiters,
// for waiters that refresh in time, and on items no other client
// rewrites. The AWS Lock Client ignores waitQueue (an attribute it does not
// know): it takes a released or expired lock without regard to fencelock's
// waiters, and its PutItem (acquire) and DeleteItem (release) wipe the
// queue, after which the waiters find their entries gone and join again,
// in the order their next reads come. Mixed fleets therefore get no
// fairness from the queue, only mutual exclusion.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock/driver"
)

// The wait queue (see Waiting, atop this file).
const (
	// maxQueue bounds the entries of one lock's wait queue, so that the
	// item stays under 1 KB (one write unit): later waiters poll until a
	// place frees.
	maxQueue = 16
	// maxLapse bounds an entry's lapse time: a waiter that died holds the
	// queue up at most this long (plus a poll) after others first saw its
	// entry.
	maxLapse = 10 * time.Second
	// fastPoll is the shortest wait between two reads of a queued waiter,
	// while the lock changes hands or the waiter moves up.
	fastPoll = 3 * time.Millisecond
)

// entryLapse is the lapse time of the entry of a waiter that asks for a
// lease of ttl: its TTL, at most maxLapse.
func entryLapse(ttl time.Duration) time.Duration { return min(max(ttl, minTTL), maxLapse) }

// formatEntry is a queue entry: "<token> <refresh count> <lapse ms>",
// and, for a waiter the lock may be handed to (see Hand-off, atop this
// file), " <lease ms> <Config.Owner> <label>" (its ownerName is
// "<Config.Owner>/<token>"). Every refresh writes a new one (the count
// goes up).
func (w *waiter) formatEntry() string {
	e := w.req.Token + " " + strconv.Itoa(w.n) + " " + leaseMillis(w.lapse)
	if o := w.b.cfg.Owner; len(o)+len(w.req.Label) <= maxHandOffMeta && o != "" && !strings.ContainsAny(o, " /") {
		e += " " + leaseMillis(w.req.TTL) + " " + o + " " + w.req.Label
	}
	return e
}

// maxHandOffMeta bounds the owner and label an entry carries for a
// hand-off (longer ones take the lock themselves), so that an item with a
// long queue stays within a couple of KB.
const maxHandOffMeta = 64

// entry is a parsed queue entry.
type entry struct {
	token string
	lapse time.Duration
	lease string // leaseDuration for a hand-off (decimal ms), "" if the waiter takes no hand-off
	owner string // ownerName for a hand-off
	label string // label for a hand-off
}

// parseEntry parses a queue entry. An entry that is not of the form
// formatEntry writes lapses after maxLapse and takes no hand-off.
func parseEntry(e string) entry {
	f := strings.SplitN(e, " ", 6)
	if len(f) != 3 && len(f) != 6 {
		return entry{token: e, lapse: maxLapse}
	}
	en := entry{token: f[0], lapse: maxLapse}
	if ms, err := strconv.ParseInt(f[2], 10, 64); err == nil && ms > 0 {
		en.lapse = min(time.Duration(ms)*time.Millisecond, maxLapse)
	}
	if len(f) == 6 {
		if ms, err := strconv.ParseInt(f[3], 10, 64); err == nil && ms >= minTTL.Milliseconds() && f[4] != "" {
			en.lease, en.owner, en.label = f[3], f[4]+"/"+f[0], f[5]
		}
	}
	return en
}

// queueWrite makes one conditional UpdateItem on the wait queue alone
// (it never touches ownerName, recordVersionNumber, isReleased or fence,
// so the holder's conditions and the waiters' observations of it are
// unaffected) and returns the state it leaves, from the new item; if the
// condition fails, from one consistent read.
func (b *backend) queueWrite(ctx context.Context, key, op, cond, expr string, vals map[string]types.AttributeValue, ns ...string) (st state, applied bool, err error) {
	out, err := b.api.UpdateItem(ctx, &ddb.UpdateItemInput{
		TableName:                 &b.cfg.Table,
		Key:                       keyOf(key),
		ConditionExpression:       &cond,
		UpdateExpression:          &expr,
		ExpressionAttributeNames:  names(append(ns, "#q")...),
		ExpressionAttributeValues: vals,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err == nil {
		st, err = b.observe(key, out.Attributes, time.Now())
		return st, true, err
	}
	if !conditionFailed(err) {
		return state{lapsed: -1}, false, classify(ctx, op, b.cfg.Table, err)
	}
	st, err = b.read(ctx, key)
	return st, false, err
}

// dropEntry removes the entry at index i of key's queue if it still is e
// (a lapsed entry: its waiter stopped refreshing it).
func (b *backend) dropEntry(ctx context.Context, key string, i int, e string) (state, error) {
	st, _, err := b.queueWrite(ctx, key, "drop a lapsed waiter",
		fmt.Sprintf("#q[%d] = :e", i), fmt.Sprintf("REMOVE #q[%d]", i),
		map[string]types.AttributeValue{":e": str(e)})
	return st, err
}

// noQueue, set only by tests, keeps blocked Acquires out of the queue:
// they poll and take the lock when it is free and nobody waits, as
// before the queue existed (the tests show that this is unfair).
var noQueue atomic.Bool

// waiter is one blocked Acquire.
type waiter struct {
	b     *backend
	req   driver.AcquireRequest
	lapse time.Duration
	n     int       // refreshes written
	entry string    // our entry as last written or read, "" if not in the queue
	pos   int       // its index in the queue last read, -1 if not in it
	maybe bool      // an enqueue was sent and the lock not granted: leave on exit
	fresh time.Time // when the last enqueue or refresh that was applied was sent
	miss  time.Time // when the last request whose reply showed the lock not ours was sent
}

// Acquire implements driver.Blocker: a blocked Acquire joins the lock's
// wait queue and takes the lock when it is first in line and the lock is
// free or expired (see Waiting, atop this file).
//
// One poller per Client and name: the blocked Acquires of one Client on
// one lock first queue up locally, in arrival order, and only the first
// of them joins the item's queue and polls; the next starts when it is
// granted or gives up. So a Client's waiters cost the table the requests
// of one waiter, whatever their number, and are served first come, first
// served; between Clients the item's queue keeps the order (a Client's
// next waiter joins it behind those that joined meanwhile).
func (b *backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	t, _ := b.line.Join(req.Name, struct{}{}) // never closed: a Client's Close ends waits through ctx
	defer b.line.Leave(req.Name, t)
	select {
	case <-t.Turn():
	case <-ctx.Done():
		return nil, time.Time{}, context.Cause(ctx)
	}
	w := &waiter{b: b, req: req, lapse: entryLapse(req.TTL), pos: -1}
	l, sent, err := w.wait(ctx)
	if err != nil && w.maybe {
		w.leave(ctx)
	}
	return l, sent, err
}

func (w *waiter) wait(ctx context.Context) (driver.Lease, time.Time, error) {
	sent := time.Now()
	w.miss = sent
	var (
		l     driver.Lease
		st    state
		err   error
		asked = sent // when the requests that returned st were sent (the first of them)
	)
	if w.b.mem.queued(w.req.Name) && !noQueue.Load() {
		// Others waited when this Client last looked (it is coming back
		// for a lock it just released, say): an acquire write would be
		// refused, so join at once; the join returns the item.
		if st, err = w.join(ctx, false); err == nil {
			err = driver.ErrNotAcquired
		}
	} else {
		l, st, err = w.b.try(ctx, w.req, "")
	}
	var (
		changed = time.Now() // when the lock last changed hands or we moved up, as we saw it
		last    string
	)
	for {
		if err == nil {
			w.maybe = false
			return l, sent, nil
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			return nil, time.Time{}, err
		}
		if l, ok := w.granted(st); ok {
			w.maybe = false
			return l, w.miss, nil
		}
		w.miss = asked
		w.locate(st)
		now := time.Now()
		asked = now
		if sig := fmt.Sprint(st.free, st.obs.rvn, w.pos); sig != last {
			last, changed = sig, now
		}
		if st.lockTakeable(now) && (w.pos == 0 || w.pos < 0 && len(st.queue) == 0) {
			head := ""
			if w.pos == 0 {
				head = w.entry
			}
			sent = now
			l, st, err = w.b.try(ctx, w.req, head)
			continue
		}
		if nst, acted, aerr := w.act(ctx, st, now); acted {
			st, err = nst, aerr
			if err == nil {
				err = driver.ErrNotAcquired
			}
			continue
		}
		t := time.NewTimer(w.delay(st, now.Sub(changed)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, time.Time{}, context.Cause(ctx)
		case <-t.C:
		}
		asked = time.Now()
		if st, err = w.b.read(ctx, w.req.Name); err == nil {
			err = driver.ErrNotAcquired
		}
	}
}

// act does the queue work st calls for, if any (acted): drop a lapsed
// entry, join the line, or refresh our entry.
func (w *waiter) act(ctx context.Context, st state, now time.Time) (state, bool, error) {
	switch {
	case st.lapsed >= 0 && st.lapsed != w.pos:
		st, err := w.b.dropEntry(ctx, w.req.Name, st.lapsed, st.queue[st.lapsed])
		return st, true, err
	case w.pos < 0 && len(st.queue) < maxQueue && !noQueue.Load():
		st, err := w.join(ctx, st.noQ || st.owner == "")
		return st, true, err
	case w.pos >= 0 && now.Sub(w.fresh) >= w.lapse/3:
		st, err := w.refresh(ctx)
		return st, true, err
	}
	return st, false, nil
}

// granted returns the lease st shows handed to us (see Hand-off, atop
// this file), if it does.
func (w *waiter) granted(st state) (*lease, bool) {
	if st.free || st.obs.rvn == "" || st.fence == 0 || st.owner != w.b.owner(w.req) {
		return nil, false
	}
	w.b.mem.forget(w.req.Name)
	l := w.b.newLease(w.req, st.owner, st.obs.rvn, st.fence)
	l.queue = st.queue
	return l, true
}

// locate finds our entry in st's queue.
func (w *waiter) locate(st state) {
	w.pos, w.entry = -1, ""
	for i, e := range st.queue {
		if parseEntry(e).token == w.req.Token {
			w.pos, w.entry = i, e
			return
		}
	}
}

// delay is the wait before the next read: a quarter of the time since the
// lock last changed hands or we moved up in line (a busy lock is read
// often, a long-held one rarely), between fastPoll and the poll interval,
// jittered down to half; no later than when the watched version expires
// or our entry needs refreshing.
func (w *waiter) delay(st state, since time.Duration) time.Duration {
	lease := w.req.TTL
	if !st.free {
		lease = st.obs.lease
	}
	iv := w.b.pollInterval(lease)
	d := min(max(since/4, min(fastPoll, iv)), iv)
	if w.pos > 1 {
		// Behind the first two in line (the first is handed the lock
		// at the next release, the second at the one after, which in a
		// busy line comes within a round trip or two): read less often
		// the further back.
		d = min(d*time.Duration(w.pos), iv)
	}
	d = d/2 + rand.N(d/2+1)
	if !st.free {
		d = min(d, time.Until(st.obs.seen.Add(st.obs.lease)))
	}
	if w.pos >= 0 {
		d = min(d, time.Until(w.fresh.Add(w.lapse/3)))
	}
	return max(d, 0)
}

// join appends a new entry of ours to the queue, if the item exists, the
// queue has room and does not hold that entry yet (an SDK retry of an
// applied append is refused). Unless the caller says the item may lack
// a waitQueue attribute (create), the condition is the short one that
// requires it (every grant by fencelock leaves one): a refusal reads the
// item, and the next join knows.
func (w *waiter) join(ctx context.Context, create bool) (state, error) {
	if err := ctx.Err(); err != nil {
		return state{lapsed: -1}, classify(ctx, "join the wait queue", w.b.cfg.Table, context.Cause(ctx))
	}
	// The join outlives ctx (settled): leave must know whether it landed.
	ctx, done := settled(ctx)
	defer done()
	w.n++
	e := w.formatEntry()
	w.maybe = true
	sent := time.Now()
	vals := map[string]types.AttributeValue{
		":e":   str(e),
		":me":  &types.AttributeValueMemberL{Value: []types.AttributeValue{str(e)}},
		":max": num(maxQueue),
	}
	// size() of a missing attribute is false: the item exists.
	cond, expr, ns := "size(#q) < :max AND NOT contains(#q, :e)", "SET #q = list_append(#q, :me)", []string(nil)
	if create {
		// Without parentheses (AND binds first): dynalite parses the
		// parenthesized form ten times slower (1.3 ms against 0.13 ms).
		cond = "attribute_exists(#rvn) AND attribute_not_exists(#q) OR attribute_exists(#rvn) AND size(#q) < :max AND NOT contains(#q, :e)"
		expr = "SET #q = list_append(if_not_exists(#q, :empty), :me)"
		vals[":empty"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{}}
		ns = []string{"#rvn"}
	}
	st, ok, err := w.b.queueWrite(ctx, w.req.Name, "join the wait queue", cond, expr, vals, ns...)
	if ok {
		w.fresh = sent
	}
	return st, err
}

// refresh replaces our entry with a new one (a higher count), so that
// others see it change.
func (w *waiter) refresh(ctx context.Context) (state, error) {
	w.n++
	e := w.formatEntry()
	sent := time.Now()
	st, ok, err := w.b.queueWrite(ctx, w.req.Name, "refresh the wait queue",
		fmt.Sprintf("#q[%d] = :old", w.pos), fmt.Sprintf("SET #q[%d] = :new", w.pos),
		map[string]types.AttributeValue{":old": str(w.entry), ":new": str(e)})
	if ok {
		w.fresh = sent
	}
	return st, err
}

// leave takes our entry out of the queue after a wait that ended without
// the lock, on a context detached from ctx: remove it at the index last
// read, conditional on the entry being there; a refused removal reads
// the queue again (another waiter left or was served, and ours moved up)
// and retries, each refusal meaning another entry changed, at most
// 2×maxQueue times. If it fails, the entry lapses by itself.
func (w *waiter) leave(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(w.req.TTL, cleanupTimeout))
	defer cancel()
	st, err := w.b.read(cctx, w.req.Name)
	for range 2 * maxQueue {
		if err != nil {
			return
		}
		if l, ok := w.granted(st); ok {
			// Handed to us meanwhile: pass it on.
			_ = l.Release(cctx)
			return
		}
		if w.locate(st); w.pos < 0 {
			return
		}
		var ok bool
		st, ok, err = w.b.queueWrite(cctx, w.req.Name, "leave the wait queue",
			fmt.Sprintf("#q[%d] = :e", w.pos), fmt.Sprintf("REMOVE #q[%d]", w.pos),
			map[string]types.AttributeValue{":e": str(w.entry)})
		if ok {
			return
		}
	}
}

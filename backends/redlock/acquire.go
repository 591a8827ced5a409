package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
	"unicode/utf8"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redisx"
)

// try is TryAcquire; it also returns when the attempt started.
//
// waiter identifies a blocked Acquire ("" for TryAcquire): the lead
// primary queues it when the lock is held there, and keeps it at the head
// of the queue once it granted it, until the lease's release (see
// acquire.lua and release.lua).
//
// An ordered attempt (a blocked Acquire's retry; see Waiting,
// atop waiter.go) asks the lead primary first and the others only once the
// lead granted. The lead grants only the first waiter in its queue
// (acquire.lua), so the waiters that race
// for a lock just released do not split the primaries' votes: only the
// one the lead granted goes on to ask the others, and the rest are refused
// after one round trip, holding nothing. This only orders the requests:
// the grant still needs a majority within the validity, as for any
// attempt. When the lead fails, or has not answered within
// leadWait (see the const), the others are asked at once and the lead's
// reply, when it comes, counts like theirs.
//
// The attempt runs in steps, each a method of acquisition: ask (the
// fan-out, lead first for an ordered attempt), awaitMajority (the
// majority decision), settleFence (the fence, written back where it must
// be) and checkValidity. A step that fails returns why; try then rolls
// the attempt back (abandon) and returns that.
//
// gone is the token of a lease whose release handed the lock to this
// waiter (from the lead's notice naming it; see Hand-off in lease.go), or
// "": the other primaries' keys holding it are taken over as free. An
// ordered attempt learns it from the lead's grant.
func (b *backend) try(ctx context.Context, req driver.AcquireRequest, waiter string, mode attemptMode, gone string) (_ *lease, start time.Time, err error) {
	if !utf8.ValidString(req.Name) {
		return nil, start, fmt.Errorf("%w: lock key %q is not valid UTF-8 (check Options.Prefix): redlock keeps its companion keys among the invalid-UTF-8 keys", driver.ErrInvalid, req.Name)
	}
	g := b.enter(req.Name)
	if g == nil {
		return nil, start, fmt.Errorf("%w: another acquire attempt on this lock from the same Client is in flight", driver.ErrNotAcquired)
	}
	defer func() { b.exit(req.Name, g, err == nil) }()
	a := b.newAcquisition(req, waiter, mode, gone)
	fence, err := a.run(ctx)
	if err != nil {
		// abandon returns the lead's refusal of an ordered attempt as it
		// is: the lead refused and the others were not asked, so no
		// primary may hold the token.
		return nil, a.start, b.abandon(req, waiter, a.k, a.at, err)
	}
	return &lease{b: b, k: a.k, token: req.Token, fence: uint64(fence), at: a.at, epoch: b.epoch.Load(), waiter: waiter, handsOff: mode != plain, gone: a.goneArg()}, a.start, nil
}

// acquisition is one acquire attempt (see try): what it asks the
// primaries, and what their replies have told so far.
type acquisition struct {
	b        *backend
	req      driver.AcquireRequest
	waiter   string // see try
	mode     attemptMode
	k        keys
	at       *attempt
	start    time.Time     // when the attempt started
	validity time.Duration // how long after start a majority's grant counts
	// Primaries get at least answerWait to answer, even when the validity
	// is shorter: a grant that comes too late is refused by checkValidity
	// (and the caller may retry), while a primary that does not answer
	// within answerWait counts as unavailable.
	callDeadline time.Time

	// What the acquire script is called with: on the lead primary, when a
	// blocked Acquire asks (waiter set), with the queue's keys and
	// arguments too (see acquire.lua).
	lockKeys, leadKeys []string
	args, leadArgs     []any // args: set before the calls to the other primaries (see askLeadFirst)

	replies   chan reply   // every primary's reply to the acquire request
	leadGone  string       // the lead's grant named a handed-off token (set by the lead's call, read after its reply)
	behindFor atomic.Int64 // the lead's refusal {0, -4, ms}: ms until the place ahead ends

	// The tally of the replies read so far.
	grants       []reply
	held, failed int
	leadHeld     bool        // the lead refused: the lock is held there (it queued a.waiter)
	pttl         int64       // the longest PTTL among refusals (-2: none)
	ends         []time.Time // when the refusals' keys run out
	errs         []error
}

func (b *backend) newAcquisition(req driver.AcquireRequest, waiter string, mode attemptMode, gone string) *acquisition {
	start := time.Now()
	validity := req.TTL - drift(req.TTL)
	n := len(b.nodes)
	k := keysFor(req.Name)
	b.snapshot(k, waiter)
	a := &acquisition{
		b: b, req: req, waiter: waiter, mode: mode, k: k, at: newAttempt(n),
		start: start, validity: validity, callDeadline: start.Add(max(validity, answerWait)),
		replies: make(chan reply, n),
		pttl:    -2,
	}
	a.setGone(gone)
	a.lockKeys = []string{k.lock, k.fence, k.void(req.Token)}
	a.leadKeys = append(slices.Clip(a.lockKeys), k.queue, k.queueDL, k.gone)
	queueMode := "1"
	if a.mode == plain {
		queueMode = "0"
	}
	a.leadArgs = []any{req.Token, millis(req.TTL), waiter, queueKeep.Milliseconds(), queueMode, labelValue(0, req.Label)}
	return a
}

// setGone sets the arguments of the acquire script on the primaries
// other than the lead, with gone, the token of a lease handed off to this
// waiter, if not "" (see try).
func (a *acquisition) setGone(gone string) {
	a.args = []any{a.req.Token, millis(a.req.TTL), labelValue(0, a.req.Label)}
	if gone != "" {
		a.args = append(a.args, gone)
	}
}

// goneArg is the token the calls to the other primaries took over, or "".
func (a *acquisition) goneArg() string {
	if len(a.args) == 4 {
		return a.args[3].(string)
	}
	return ""
}

// run takes the attempt through its steps and returns the fence granted,
// or why the attempt failed (not yet rolled back).
func (a *acquisition) run(ctx context.Context) (fence int64, err error) {
	if err := a.ask(ctx); err != nil {
		return 0, err
	}
	if err := a.awaitMajority(ctx); err != nil {
		return 0, err
	}
	if fence, err = a.settleFence(ctx); err != nil {
		return 0, err
	}
	return fence, a.checkValidity()
}

// call runs the acquire script on primary i, for a fan-out, and records
// what its reply says about the primary in a.at.
func (a *acquisition) call(ctx context.Context, i int) (int64, int64, error) {
	ks, as := a.lockKeys, a.args
	if i == lead && a.waiter != "" {
		ks, as = a.leadKeys, a.leadArgs
	}
	res, gone, err := acquireReply(acquireScript.Run(ctx, a.b.nodes[i].c, ks, as...), len(ks) == len(a.leadKeys))
	if err == nil && len(res) == 3 {
		a.behindFor.Store(res[2])
	}
	if gone != "" {
		a.leadGone = gone
	}
	if i == lead {
		a.b.leadSlow.Store(err != nil && !redisx.IsReply(err))
	}
	switch {
	case err == nil && res[0] == 1:
		a.at.states[i].Store(stateGranted)
		return 1, res[1], nil
	case err == nil:
		a.at.states[i].Store(stateRefused)
		return 0, res[1], nil
	case redisx.NotSent(err):
		a.at.states[i].Store(stateNotSent)
	case redisx.IsReply(err):
		a.at.states[i].Store(stateRefused)
	default:
		a.at.states[i].Store(stateUnknown)
	}
	return 0, 0, err
}

// acquireReply parses the acquire script's reply: {granted, value}, or
// {0, -4, ms} (res), or, from the lead with the queue (queued), {1,
// counter, gone token} (gone; see Hand-off in lease.go).
func acquireReply(cmd *goredis.Cmd, queued bool) (res []int64, gone string, err error) {
	if !queued {
		res, err = cmd.Int64Slice()
	} else {
		var vs []any
		if vs, err = cmd.Slice(); err == nil {
			for j, v := range vs {
				switch v := v.(type) {
				case int64:
					res = append(res, v)
				case string:
					if j == 2 && len(res) == 2 && res[0] == 1 {
						gone = v
						continue
					}
					err = fmt.Errorf("acquire script returned %v, want {granted, value}", vs)
				default:
					err = fmt.Errorf("acquire script returned %v, want {granted, value}", vs)
				}
			}
		}
	}
	switch {
	case err != nil:
		return nil, "", err
	case len(res) == 2, len(res) == 3 && res[1] == -4:
		return res, gone, nil
	}
	return nil, "", fmt.Errorf("acquire script returned %v, want {granted, value}", res)
}

// ask sends the acquire request: to every primary at once, or, for an
// ordered attempt, to the lead first (askLeadFirst). The replies arrive
// on a.replies.
func (a *acquisition) ask(ctx context.Context) error {
	if a.mode == ordered {
		return a.askLeadFirst(ctx)
	}
	a.b.fanInto(a.replies, a.callDeadline, all(len(a.b.nodes)), a.call)
	return nil
}

// askLeadFirst asks the lead primary, and the others once it granted,
// failed, or has not answered within a.leadWait(). The
// lead's refusal ends the attempt, holding nothing; its grant or failure
// is put back on a.replies, to be counted with the others'.
func (a *acquisition) askLeadFirst(ctx context.Context) error {
	n := len(a.b.nodes)
	// Until the others are asked, they are known not to hold our token:
	// an abandon skips them.
	rest := make([]int, 0, n-1)
	for i := range n {
		if i != lead {
			rest = append(rest, i)
			a.at.states[i].Store(stateNotSent)
		}
	}
	a.b.fanInto(a.replies, a.callDeadline, []int{lead}, a.call)
	wait := time.NewTimer(a.leadWait())
	select {
	case r := <-a.replies:
		wait.Stop()
		if r.err == nil && r.a == 0 {
			return a.leadRefused(r)
		}
		if r.err == nil && a.leadGone != "" && len(a.args) == 3 {
			a.setGone(a.leadGone) // the lead's grant: take over the handed-off lease's keys
		}
		a.replies <- r // granted, or failed: counted with the others' replies
	case <-wait.C: // the lead is slow: ask the others without waiting for it
		a.b.leadSlow.Store(true)
	case <-ctx.Done():
		wait.Stop()
		return ctxErr(ctx, "acquire", "waiting for the lead primary")
	}
	for _, i := range rest {
		a.at.states[i].Store(statePending)
	}
	a.b.fanInto(a.replies, a.callDeadline, rest, a.call)
	return nil
}

// leadWait is how long the attempt waits for the lead's answer before it
// goes on without it (see the const leadWait).
func (a *acquisition) leadWait() time.Duration {
	if a.b.leadSlow.Load() {
		return min(maxLeadWait, a.validity/4)
	}
	return min(leadWait, a.validity/4)
}

// leadRefused is the error for the lead primary's refusal r of an ordered
// or named attempt: the lock is held there, or earlier waiters are queued there.
// It says when to retry when the lead told.
func (a *acquisition) leadRefused(r reply) error {
	why, ms := errLeadHeld, r.b
	if r.b == -4 {
		why, ms = errBehind, a.behindFor.Load()
	}
	err := fmt.Errorf("%w: the lead primary %s %w", driver.ErrNotAcquired, a.b.nodes[lead].addr, why)
	if ms >= 0 {
		return &freeAt{err, expiresBy(time.Now(), ms)}
	}
	return err
}

// awaitMajority counts replies until a majority granted (nil), or so many
// refused or failed that no majority can grant (the refusal, saying when
// the lock may be free where the refusals tell).
func (a *acquisition) awaitMajority(ctx context.Context) error {
	n, q := len(a.b.nodes), a.b.quorum
	// A named attempt waits for the lead's verdict too (as long as an
	// ordered attempt would): its refusal, or its silence, ends the
	// attempt, so that the queue's order holds even when the others answer
	// first.
	var leadWait <-chan time.Time
	leadPending := a.mode == named
	if leadPending {
		t := time.NewTimer(a.leadWait())
		defer t.Stop()
		leadWait = t.C
	}
	for (len(a.grants) < q || leadPending) && a.held+a.failed <= n-q {
		select {
		case r := <-a.replies:
			if r.i == lead && leadPending {
				leadPending = false
				if r.err == nil && r.a == 0 {
					return a.leadRefused(r)
				}
			}
			a.count(r)
		case <-leadWait:
			// Without the lead's verdict a named attempt does not decide:
			// it fails, saying the lock may be free now, and the retry is
			// an ordered attempt, which goes on without a slow lead.
			a.b.leadSlow.Store(true)
			return &freeAt{fmt.Errorf("%w: redlock acquire: the lead primary %s did not answer within %v", driver.ErrNotAcquired, a.b.nodes[lead].addr, a.leadWait()), time.Now()}
		case <-ctx.Done():
			return ctxErr(ctx, "acquire", fmt.Sprintf("%d of %d primaries had granted, %d needed", len(a.grants), n, q))
		}
	}
	if len(a.grants) >= q {
		return nil
	}
	err := refusal(n, q, a.held, a.failed, a.pttl, a.errs)
	if a.leadHeld && a.waiter != "" {
		err = fmt.Errorf("%w; the lead primary %s %w", err, a.b.nodes[lead].addr, errQueued)
	}
	if free, ok := majorityFreeAt(n, q, a.held, a.failed, a.ends); ok && a.failed <= n-q {
		err = &freeAt{err, free}
	}
	return err
}

// count adds reply r to the tally.
func (a *acquisition) count(r reply) {
	switch {
	case r.err != nil:
		a.failed++
		a.errs = append(a.errs, nodeErr(a.b.nodes[r.i].addr, "acquire", r.err))
	case r.a == 1:
		a.grants = append(a.grants, r)
	default:
		a.held++
		a.leadHeld = a.leadHeld || (r.i == lead && r.b != -3)
		if r.b == -1 || (a.pttl != -1 && r.b > a.pttl) {
			a.pttl = r.b
		}
		if r.b >= 0 {
			a.ends = append(a.ends, expiresBy(time.Now(), r.b))
		}
	}
}

// answered is how many primaries' replies have been counted.
func (a *acquisition) answered() int { return len(a.grants) + a.held + a.failed }

// settleFence decides the fence of a granted majority and makes sure a
// majority stores it.
//
// The fence f is the q-th smallest counter the granting primaries
// returned; W is the set of granting primaries whose counter is f, plus
// those below f that get f written back (each only while it still holds
// our token), until W is a majority. Every member of W returned a counter
// ≤ f and stores ≥ f, written while our token held the lock there: that
// is all the proof in Fences (atop redlock.go) needs. When W falls short and more
// replies are on their way, they are awaited first (awaitAgreement): a
// later grant may agree and spare the write-back round trip.
func (a *acquisition) settleFence(ctx context.Context) (int64, error) {
	q := a.b.quorum
	fence, stored, behind := fenceOf(a.grants, q)
	if stored < q && a.answered() < len(a.b.nodes) {
		if err := a.awaitAgreement(ctx); err != nil {
			return 0, err
		}
		fence, stored, behind = fenceOf(a.grants, q)
	}
	if stored < q {
		return fence, a.writeBack(ctx, fence, stored, behind)
	}
	return fence, nil
}

// awaitAgreement counts the replies still on their way, for at most as
// long as the attempt took so far, until the grants' fence is stored on a
// majority (see fenceOf).
func (a *acquisition) awaitAgreement(ctx context.Context) error {
	n, q := len(a.b.nodes), a.b.quorum
	_, stored, _ := fenceOf(a.grants, q)
	grace := time.NewTimer(time.Since(a.start))
	defer grace.Stop()
	for stored < q && a.answered() < n {
		select {
		case r := <-a.replies:
			switch {
			case r.err != nil:
				a.failed++
			case r.a == 1:
				a.grants = append(a.grants, r)
				_, stored, _ = fenceOf(a.grants, q)
			default:
				a.held++
			}
		case <-grace.C:
			return nil
		case <-ctx.Done():
			return ctxErr(ctx, "acquire", "waiting for more grants")
		}
	}
	return nil
}

// writeBack writes fence to the granting primaries behind it (each only
// while it still holds our token) until a majority stores it; stored
// already do.
func (a *acquisition) writeBack(ctx context.Context, fence int64, stored int, behind []int) error {
	q := a.b.quorum
	wb := a.b.fan(a.callDeadline, behind, func(ctx context.Context, i int) (int64, int64, error) {
		v, err := writebackScript.Run(ctx, a.b.nodes[i].c, []string{a.k.lock, a.k.fence}, a.req.Token, fence).Int64()
		return v, 0, err
	})
	var lost int
	for got := 0; got < len(behind) && stored < q; got++ {
		select {
		case r := <-wb:
			switch {
			case r.err != nil:
				a.errs = append(a.errs, nodeErr(a.b.nodes[r.i].addr, "fence write-back", r.err))
			case r.a == 1:
				stored++
			default:
				lost++
			}
		case <-ctx.Done():
			return ctxErr(ctx, "acquire", "writing the fence back")
		}
	}
	if stored < q {
		// A majority granted: once the attempt is abandoned the lock is
		// free, and a blocked Acquire retries at once (freeAt now).
		return &freeAt{fmt.Errorf("%w: redlock acquire: a majority granted, but the fence reached only %d of the %d primaries needed in time (%d lost the lock meanwhile): %w",
			driver.ErrNotAcquired, stored, q, lost, errors.Join(a.errs...)), time.Now()}
	}
	return nil
}

// checkValidity refuses a grant that came after the validity ended. A
// majority granted, so the lock is free once the attempt is abandoned:
// the refusal says so (freeAt now), and a blocked Acquire retries at once
// rather than after its backoff.
func (a *acquisition) checkValidity() error {
	if el := time.Since(a.start); el >= a.validity {
		return &freeAt{fmt.Errorf("%w: redlock acquire: a majority granted only after %v, past the validity of the %v TTL (TTL − %g×TTL − %v): if this persists, raise the TTL or check the primaries' latency",
			driver.ErrNotAcquired, el.Round(time.Microsecond), a.req.TTL, DriftFactor, DriftMin), time.Now()}
	}
	return nil
}

// refusal explains a failed attempt. It is ErrUnavailable when so many
// primaries failed that no majority can answer, else ErrNotAcquired: the
// lock is held (or contended) on enough primaries, and waiting can help.
func refusal(n, q, held, failed int, pttl int64, errs []error) error {
	if failed > n-q {
		return fmt.Errorf("redlock acquire: %d of %d primaries failed, so no majority of %d can grant: %w", failed, n, q, errors.Join(errs...))
	}
	why := fmt.Sprintf("%d of %d primaries hold the lock for another owner", held, n)
	if failed > 0 {
		why += fmt.Sprintf(" and %d did not answer (%v)", failed, errors.Join(errs...))
	}
	switch pttl {
	case -1:
		why += "; a key has no expiry, so its holder is not a lease and never frees itself: delete it by hand if its owner is gone"
	case -2, -3, -4:
	default:
		why += fmt.Sprintf("; the longest expires in %v unless renewed", time.Duration(pttl)*time.Millisecond)
	}
	return fmt.Errorf("%w: %s", driver.ErrNotAcquired, why)
}

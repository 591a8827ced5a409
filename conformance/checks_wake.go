package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

func init() {
	register(
		check{name: "ExpiryWakesWaiter", run: testExpiryWakesWaiter},
		check{name: "ReleaseWakesDeafBackoff", run: testReleaseWakesDeafBackoff},
		check{name: "FIFORefusesBarging", run: testFIFORefusesBarging},
	)
}

// admin returns the backend's admin hooks if the harness has them.
func (e *env) admin() driver.Admin {
	if a, ok := e.h.(Administered); ok {
		return a.Admin()
	}
	return nil
}

// waitQueued waits until n Acquires are queued for name, through the
// backend's QueueAdmin; without one it gives the waiter settle to queue
// (and says so).
func (e *env) waitQueued(t TB, name string, n int, settle time.Duration) {
	t.Helper()
	q, ok := e.admin().(driver.QueueAdmin)
	if !ok {
		t.Logf("no QueueAdmin: giving the waiter %v to queue instead of seeing it queued", settle)
		e.sleep(settle)
		return
	}
	e.waiting(fmt.Sprintf("%d waiter(s) queued for %s (QueueAdmin)", n, name))
	deadline := time.Now().Add(e.margin)
	for {
		got, err := q.Waiters(e.ctx, e.key(name))
		mustNil(t, err, "QueueAdmin.Waiters")
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("QueueAdmin.Waiters(%s) = %d after %v, want %d", name, got, e.margin, n)
		}
		e.sleep(2 * time.Millisecond)
	}
}

// waiterClient is a client for a waiter whose wake-ups the check times
// against a declared bound (ExpiryWake): where the backend declares one,
// its Options.Backoff is a minute, so that only the store (a notice, its
// queue, the backend's own polling) can wake it in time, not the portable
// layer's retries.
func (e *env) waiterClient() *fencelock.Client {
	if e.caps.ExpiryWake <= 0 {
		return e.client()
	}
	return e.clientWith(&fencelock.Options{Backoff: func(int) time.Duration { return time.Minute }})
}

// testExpiryWakesWaiter: a holder abandons the lock (AutoRenew off, no
// Release) and a waiter that has already waited and been granted before
// waits again: it is granted after the holder's ValidUntil and within the
// store's TTL plus the declared ExpiryWake (and its tolerance) of the
// holder's grant, however many times it waited before, and however long
// its Client's backoff.
func testExpiryWakesWaiter(t TB, e *env) {
	a, b := e.client(), e.waiterClient()
	name := e.name("x")
	var bound time.Duration
	if w := e.caps.ExpiryWake; w > 0 {
		bound = w + promiseTol(w)
	} else {
		bound = e.margin
	}
	// Round 0 makes b a waiter that has been handed the lock once.
	l0, err := a.Acquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "Acquire")
	first := e.acquireSampling(b, name, l0, e.margin)
	e.waitQueued(t, name, 1, 50*time.Millisecond)
	mustNil(t, l0.Release(e.ctx), "Release")
	e.waiting("the first hand-off")
	g0 := <-first
	mustNil(t, g0.err, "the waiter's first Acquire")
	mustNil(t, g0.l.Release(e.ctx), "Release")
	abandoned := func(round int, la *fencelock.Lease, a1 time.Time, ttl time.Duration) {
		t.Helper()
		s := leaseStoreTTL(la, ttl)
		got := e.acquireSampling(b, name, la, s+bound+e.margin)
		e.waiting(fmt.Sprintf("round %d: the returning waiter's grant after the abandoned lease's TTL", round))
		g := <-got
		mustNil(t, g.err, fmt.Sprintf("round %d: the returning waiter's Acquire", round))
		if g.overlapped() {
			t.Fatalf("round %d: two holders: the waiter was granted while the abandoned lease was valid for %v more", round, g.holderVU.Sub(g.at).Round(time.Millisecond))
		}
		late := g.at.Sub(a1.Add(s))
		if late > bound {
			t.Fatalf("round %d: the returning waiter was granted %v after the abandoned lease's store TTL %v ran out: over the declared ExpiryWake %v + tolerance (%v)",
				round, late.Round(time.Millisecond), s, e.caps.ExpiryWake, bound)
		}
		t.Logf("round %d: granted %v after the store TTL %v ran out (ExpiryWake %v)", round, late.Round(time.Millisecond), s, e.caps.ExpiryWake)
		e.checkFence(t, la.Fence(), g.l.Fence(), "grant after expiry")
		mustNil(t, g.l.Release(e.ctx), "Release")
		_ = la.Release(e.ctx)
	}
	for round := 1; round <= 3; round++ {
		la, err := a.TryAcquire(e.ctx, name, opts(e.ttl, false))
		a1 := time.Now()
		mustNil(t, err, "TryAcquire by the holder that will abandon the lock")
		abandoned(round, la, a1, e.ttl)
	}
	// Round 4: the holder that abandons the lock was itself granted it
	// after waiting (a store may treat a waiter it handed the lock to
	// differently from one that took a free lock), with the shortest TTL
	// near a quarter of the check's, so that a place in a queue that
	// outlives a short lease shows as lateness past the tolerance.
	ttl4 := shortTTL(e.caps, e.ttl/4)
	c := e.client()
	lc, err := c.Acquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "Acquire")
	type res struct {
		l  *fencelock.Lease
		at time.Time
	}
	handed := make(chan res, 1)
	go func() {
		l, err := a.Acquire(e.ctx, name, opts(ttl4, false))
		if err != nil {
			t.Errorf("round 4: the holder's Acquire after waiting: %v", err)
		}
		handed <- res{l, time.Now()}
	}()
	e.waitQueued(t, name, 1, 50*time.Millisecond)
	mustNil(t, lc.Release(e.ctx), "Release")
	e.waiting("round 4: the hand-off to the holder that will abandon the lock")
	h := <-handed
	if h.l == nil {
		t.Fatalf("round 4: no lease handed over")
	}
	abandoned(4, h.l, h.at, ttl4)
}

// testReleaseWakesDeafBackoff: a waiter whose Client polls only once a
// minute (Options.Backoff) is still granted within the declared
// ReleaseWake (and its tolerance) of a Release: the store's notice or
// queue wakes it, not its polling. A waiter deaf to release notices waits
// for its backoff and fails.
func testReleaseWakesDeafBackoff(t TB, e *env) {
	w := e.caps.ReleaseWake
	if w <= 0 {
		notApplicable(t, "the backend declares no ReleaseWake: its waiters poll (Options.Backoff)")
	}
	bound := w + promiseTol(w)
	a := e.client()
	b := e.clientWith(&fencelock.Options{Backoff: func(int) time.Duration { return time.Minute }})
	name := e.name("x")
	for round := range 3 {
		la, err := a.Acquire(e.ctx, name, opts(longTTL, true))
		mustNil(t, err, "Acquire")
		got := e.acquireSampling(b, name, la, e.margin+bound)
		e.waitQueued(t, name, 1, max(200*time.Millisecond, w))
		released := time.Now()
		mustNil(t, la.Release(e.ctx), "Release")
		e.waiting(fmt.Sprintf("round %d: the waiter with a one-minute backoff after Release", round))
		g := <-got
		mustNil(t, g.err, fmt.Sprintf("round %d: the waiter's Acquire", round))
		took := g.at.Sub(released)
		if took > bound {
			t.Fatalf("round %d: a waiter with a one-minute backoff was granted %v after the Release: over the declared ReleaseWake %v + tolerance (%v); is it deaf to release notices?",
				round, took.Round(time.Millisecond), w, bound)
		}
		t.Logf("round %d: granted %v after Release (ReleaseWake %v)", round, took.Round(time.Millisecond), w)
		mustNil(t, g.l.Release(e.ctx), "Release")
	}
}

// testFIFORefusesBarging: on a backend that declares FIFO, a TryAcquire
// sent right after the holder's Release returned, while another Acquire
// is queued, is refused: the queued waiter is next, and is granted.
func testFIFORefusesBarging(t TB, e *env) {
	if !e.caps.FIFO {
		notApplicable(t, "the backend does not declare FIFO")
	}
	a, b, c := e.client(), e.client(), e.client()
	name := e.name("x")
	for round := range 5 {
		la, err := a.Acquire(e.ctx, name, opts(longTTL, true))
		mustNil(t, err, "Acquire")
		got := e.acquireSampling(b, name, la, e.margin)
		e.waitQueued(t, name, 1, 250*time.Millisecond)
		mustNil(t, la.Release(e.ctx), "Release")
		lc, err := c.TryAcquire(e.ctx, name, opts(longTTL, false))
		if err == nil {
			_ = lc.Release(e.ctx)
			t.Fatalf("round %d: a TryAcquire right after the Release was granted while another Acquire was queued: the backend declares FIFO", round)
		}
		if !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("round %d: TryAcquire right after the Release: %v", round, err)
		}
		e.waiting(fmt.Sprintf("round %d: the queued waiter's grant", round))
		g := <-got
		mustNil(t, g.err, fmt.Sprintf("round %d: the queued waiter's Acquire", round))
		e.checkFence(t, la.Fence(), g.l.Fence(), "FIFO hand-off")
		mustNil(t, g.l.Release(e.ctx), "Release")
	}
}

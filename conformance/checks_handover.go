package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
)

func init() {
	register(
		check{name: "ExtendAfterStoreDropIsLost", run: testExtendAfterDrop},
		check{name: "ReleaseAfterStoreDropIsLost", run: testReleaseAfterDrop},
		check{name: "GrantTimeBounds", run: testGrantTimeBounds},
		check{name: "ExtendToShorterTTL", run: testExtendShorter},
	)
}

// expirer returns the harness's Expirer hook or skips the check.
func (e *env) expirer(t TB) Expirer {
	t.Helper()
	x, ok := e.h.(Expirer)
	if !ok {
		t.Skipf("harness has no Expirer hook (on the URL harness the backend must implement driver.Admin)")
	}
	return x
}

// dropAndRetake takes name on a with a long TTL and AutoRenew off, makes
// the store drop it (Expirer), and, if retake, has b take it. The local
// deadline is far away, so the portable layer must ask the driver about
// the dropped lease (unless the store signalled the loss itself).
func (e *env) dropAndRetake(t TB, x Expirer, a, b *fencelock.Client, name string, retake bool) (stale, holder *fencelock.Lease) {
	t.Helper()
	stale, err := a.TryAcquire(e.ctx, name, opts(longTTL, false))
	mustNil(t, err, "TryAcquire "+name)
	e.waiting("Expire of " + name + " in the store")
	mustNil(t, x.Expire(e.ctx, e.key(name)), "Expire")
	if !retake {
		return stale, nil
	}
	e.waiting("another client's TryAcquire of the dropped " + name)
	holder, err = b.TryAcquire(e.ctx, name, opts(longTTL, false))
	mustNil(t, err, "TryAcquire by another client after the store dropped "+name)
	t.Cleanup(func() { _ = holder.Release(context.Background()) })
	e.checkFence(t, stale.Fence(), holder.Fence(), "grant after the store dropped "+name)
	return stale, holder
}

// intact asserts that holder still holds its lock: its lease is alive, a
// third client is refused, and holder can renew.
func (e *env) intact(t TB, c *fencelock.Client, holder *fencelock.Lease, after string) {
	t.Helper()
	if err := holder.Err(); err != nil {
		t.Fatalf("the new holder's lease ended after %s: %v", after, err)
	}
	_, err := c.TryAcquire(e.ctx, holder.Name(), nil)
	mustIs(t, err, fencelock.ErrNotAcquired, "TryAcquire by a third client after "+after+" (the stale holder freed or took the new holder's lock)")
	mustNil(t, holder.Extend(e.ctx, 0), "the new holder's Extend after "+after)
}

// testExtendAfterDrop: Extend of a lease the store dropped reports
// ErrLeaseLost while the lease is still valid locally (so the driver is
// asked), does not take the lock back, and leaves a new holder intact.
func testExtendAfterDrop(t TB, e *env) {
	x := e.expirer(t)
	a, b, c := e.client(), e.client(), e.client()

	// Dropped, no other holder: the lock must stay free.
	free := e.name("free")
	stale, _ := e.dropAndRetake(t, x, a, b, free, false)
	e.waiting("Extend of the dropped lease")
	mustIs(t, stale.Extend(e.ctx, longTTL), fencelock.ErrLeaseLost, "Extend of a lease the store dropped, before its local deadline")
	mustIs(t, stale.Err(), fencelock.ErrLeaseLost, "Err after an Extend that found the lease dropped")
	l, err := c.TryAcquire(e.ctx, free, opts(longTTL, false))
	mustNil(t, err, "TryAcquire after the failed Extend (an Extend must not take a dropped lock back)")
	mustNil(t, l.Release(e.ctx), "Release")

	// Dropped and granted to another client.
	taken := e.name("taken")
	stale, holder := e.dropAndRetake(t, x, a, b, taken, true)
	e.waiting("Extend of the lease the store gave to another client")
	mustIs(t, stale.Extend(e.ctx, longTTL), fencelock.ErrLeaseLost, "Extend of a lease the store gave to another client, before its local deadline")
	e.intact(t, c, holder, "the stale holder's Extend")
	mustIs(t, stale.Release(e.ctx), fencelock.ErrLeaseLost, "Release after the failed Extend")
	e.intact(t, c, holder, "the stale holder's Release")
}

// testReleaseAfterDrop: Release of a lease the store dropped reports
// ErrLeaseLost while the lease is still valid locally (so the driver is
// asked) and never frees a new holder's lock.
func testReleaseAfterDrop(t TB, e *env) {
	x := e.expirer(t)
	a, b, c := e.client(), e.client(), e.client()

	free := e.name("free")
	stale, _ := e.dropAndRetake(t, x, a, b, free, false)
	e.waiting("Release of the dropped lease")
	mustIs(t, stale.Release(e.ctx), fencelock.ErrLeaseLost, "Release of a lease the store dropped, before its local deadline")
	mustIs(t, stale.Err(), fencelock.ErrLeaseLost, "Err after a Release that found the lease dropped")

	taken := e.name("taken")
	stale, holder := e.dropAndRetake(t, x, a, b, taken, true)
	e.waiting("Release of the lease the store gave to another client")
	mustIs(t, stale.Release(e.ctx), fencelock.ErrLeaseLost, "Release of a lease the store gave to another client, before its local deadline")
	e.intact(t, c, holder, "the stale holder's Release")
}

// Grant-time tolerance: how much earlier than the store's earliest legal
// re-grant the successful request may have been sent (its transit and the
// scheduling of a loaded machine): max(50ms, TTL/5).
func grantTolerance(ttl time.Duration) time.Duration { return max(50*time.Millisecond, ttl/5) }

// driftRate is the clock-rate drift between client and store the portable
// layer allows by default (Options.DriftFactor).
const driftRate = 0.01

// testGrantTimeBounds: an expiry hand-off, timed from both sides of each
// call, so that an early grant is caught even when its reply is slow.
//
// Holder a takes the lock with TTL T and AutoRenew off. A0 is when a's
// TryAcquire call started: the store started a's TTL clock no earlier, so
// with the store's TTL S = Lease.StoreTTL() ≥ T it may grant the lock again
// no earlier than A0 + S·(1−ρ), ρ = 1% being the clock-rate drift allowed.
// Waiter b polls with TryAcquire; B0 is when its successful attempt started
// and B1 when that attempt returned; the store granted it at some moment in
// [B0 + transit, B1]. Asserted:
//
//   - request side: B0 ≥ A0 + S·(1−ρ) − tol. A correct store refuses every
//     request that reaches it earlier, so the one it granted was sent no
//     earlier than that minus its transit time; tol = max(50ms, T/5,
//     2 × the slowest refused poll) covers transit and scheduling on a
//     loaded machine. A store that
//     grants early is caught here however slow its reply (an upper-bound
//     check, B1 against a deadline, lets a slow reply hide an early grant).
//   - the holder's side: B0 ≥ a.ValidUntil() − tol: a request sent well
//     before a's local deadline was granted while a still believed it held
//     the lock; and B1 ≥ a.ValidUntil(): b cannot know it holds the lock
//     before a's deadline has passed.
//   - liveness: b is granted within S + margin of A1, the end of a's call.
func testGrantTimeBounds(t TB, e *env) {
	a, b := e.client(), e.client()
	ttl := e.ttl
	tol := grantTolerance(ttl)
	poll := min(max(ttl/100, time.Millisecond), 20*time.Millisecond)
	for round := range 3 {
		name := e.name(fmt.Sprintf("r%d", round))
		a0 := time.Now()
		la, err := a.TryAcquire(e.ctx, name, opts(ttl, false))
		a1 := time.Now()
		mustNil(t, err, "TryAcquire by the holder")
		s := leaseStoreTTL(la, ttl)
		vu := la.ValidUntil()
		earliest := a0.Add(time.Duration(float64(s) * (1 - driftRate)))
		e.waiting(fmt.Sprintf("round %d: the waiter's TryAcquire to succeed after the holder's TTL", round))
		var b0, b1 time.Time
		var lb *fencelock.Lease
		var slowest time.Duration // longest refused poll: how loaded the machine is now
		for lb == nil {
			if time.Since(a1) > s+e.margin {
				t.Fatalf("round %d: the lock was not granted again within %v of the holder's acquire (store TTL %v)", round, time.Since(a1).Round(time.Millisecond), s)
			}
			b0 = time.Now()
			lb, err = b.TryAcquire(e.ctx, name, opts(longTTL, false))
			b1 = time.Now()
			switch {
			case errors.Is(err, fencelock.ErrNotAcquired):
				slowest = max(slowest, b1.Sub(b0))
				e.sleep(poll)
			case err != nil:
				t.Fatalf("round %d: waiter's TryAcquire: %v", round, err)
			}
		}
		t.Cleanup(func() { _ = lb.Release(context.Background()) })
		// On a starved machine a request can take as long to reach the store
		// as the slowest refused poll took in all: widen the tolerance by
		// that, which a store that grants early with a slow reply does not
		// earn (its refusals are fast).
		tol := max(tol, 2*slowest)
		if b0.Before(earliest.Add(-tol)) {
			t.Fatalf("round %d: the grant's request was sent %v after the holder's acquire started, %v before the store's TTL %v could have passed (tolerance %v): the store granted the lock early",
				round, b0.Sub(a0).Round(time.Millisecond), earliest.Sub(b0).Round(time.Millisecond), s, tol)
		}
		if b0.Before(vu.Add(-tol)) {
			t.Fatalf("round %d: the grant's request was sent %v before the holder's ValidUntil (tolerance %v): two holders", round, vu.Sub(b0).Round(time.Millisecond), tol)
		}
		if b1.Before(vu) {
			t.Fatalf("round %d: the waiter was granted (reply at %v) before the holder's ValidUntil %v: two holders", round, b1.Sub(a0), vu.Sub(a0))
		}
		e.checkFence(t, la.Fence(), lb.Fence(), "grant after expiry")
		t.Logf("round %d: TTL %v (store %v); grant request sent at A0+%v, reply at A0+%v; holder valid until A0+%v",
			round, ttl, s, b0.Sub(a0).Round(time.Millisecond), b1.Sub(a0).Round(time.Millisecond), vu.Sub(a0).Round(time.Millisecond))
		mustNil(t, lb.Release(e.ctx), "Release")
		_ = la.Release(e.ctx)
	}
}

// testExtendShorter: Extend to a shorter TTL moves ValidUntil earlier, to
// at most the Extend's send time + the new TTL, so the lease ends locally
// before the store can grant the lock to another client (a deadline that
// only moves forward leaves two holders). With a RenewalStaller hook it
// also checks that Extend and Release honour their ctx while a renewal is
// in flight.
func testExtendShorter(t TB, e *env) {
	a, b := e.client(), e.client()
	name := e.name("x")
	long := max(5*time.Second, 10*e.effTTL())
	l, err := a.TryAcquire(e.ctx, name, opts(long, false))
	mustNil(t, err, "TryAcquire")
	short := e.ttl
	x0 := time.Now()
	mustNil(t, l.Extend(e.ctx, short), fmt.Sprintf("Extend from %v to %v", long, short))
	x1 := time.Now()
	vu := l.ValidUntil()
	if vu.After(x1.Add(short)) {
		t.Fatalf("after Extend(%v) ValidUntil is %v after the call returned; want at most the Extend's send time + %v (it must move earlier)",
			short, vu.Sub(x1).Round(time.Millisecond), short)
	}
	if vu.Before(x0.Add(short - short/10 - 5*time.Millisecond)) {
		t.Errorf("after Extend(%v) ValidUntil is only %v after the call started", short, vu.Sub(x0).Round(time.Millisecond))
	}
	e.waiting("another client's grant after the shortened TTL")
	for {
		if time.Since(x1) > e.effTTL()+e.margin {
			t.Fatalf("the lock was not free %v after Extend(%v): the store kept the old TTL %v", time.Since(x1).Round(time.Millisecond), short, long)
		}
		lb, err := b.TryAcquire(e.ctx, name, opts(longTTL, false))
		granted := time.Now()
		if errors.Is(err, fencelock.ErrNotAcquired) {
			e.sleep(min(max(short/100, time.Millisecond), 20*time.Millisecond))
			continue
		}
		mustNil(t, err, "TryAcquire after the shortened TTL")
		t.Cleanup(func() { _ = lb.Release(context.Background()) })
		if granted.Before(vu) {
			t.Fatalf("another client was granted the lock %v before the shortened lease's ValidUntil: two holders", vu.Sub(granted).Round(time.Millisecond))
		}
		break
	}
	e.waiting("the shortened lease to end")
	if !waitDone(l, e.margin) {
		t.Fatalf("the shortened lease still held %v after its ValidUntil, after another client took the lock", time.Since(vu).Round(time.Millisecond))
	}
	mustIs(t, l.Err(), fencelock.ErrLeaseLost, "Err of the shortened lease")

	st, ok := e.h.(RenewalStaller)
	if !ok {
		t.Logf("Extend/Release during a slow renewal not checked: the harness cannot slow the store (RenewalStaller)")
		return
	}
	e.ctxDuringSlowRenewal(t, st)
}

// ctxDuringSlowRenewal: while an automatic renewal is stuck in a slow
// store, Extend and Release with a 100ms ctx return within their ctx
// (plus slack), not when the renewal ends.
func (e *env) ctxDuringSlowRenewal(t TB, st RenewalStaller) {
	t.Helper()
	c, b := e.client(), e.client()
	name := e.name("slow")
	ttl := max(1200*time.Millisecond, 3*e.effTTL())
	stall := ttl / 2 // in flight from TTL/3 to 5/6 TTL: the lease survives it
	l, err := c.TryAcquire(e.ctx, name, opts(ttl, true))
	mustNil(t, err, "TryAcquire")
	undo := st.StallExtends(c, stall)
	defer undo()
	e.waiting("the renewal to be in flight")
	e.sleep(time.Until(l.ValidUntil().Add(-ttl + ttl/3 + ttl/12)))
	const bound = 100 * time.Millisecond
	slack := max(250*time.Millisecond, e.margin/4)
	for _, op := range []string{"Extend", "Release"} {
		ctx, cancel := context.WithTimeout(e.ctx, bound)
		t0 := time.Now()
		e.waiting(op + " with a 100ms ctx during a slow renewal")
		if op == "Extend" {
			err = l.Extend(ctx, 0)
		} else {
			err = l.Release(ctx)
		}
		took := time.Since(t0)
		cancel()
		if took > bound+slack {
			t.Errorf("%s with a %v ctx during a renewal stalled for %v returned after %v (%v)", op, bound, stall, took.Round(time.Millisecond), err)
		}
		if op == "Extend" && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Extend whose ctx ended while a renewal was in flight: got %v, want an error matching context.DeadlineExceeded", err)
		}
	}
	undo()
	_ = l.Release(e.ctx)
	e.waiting("the lock to be free after the stalled lease")
	l2, err := b.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: ttl + e.margin})
	mustNil(t, err, "Acquire after the stalled lease")
	mustNil(t, l2.Release(e.ctx), "Release")
}

package conformance

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
)

func init() {
	register(
		check{name: "FencesIncreaseAcrossClients", run: testFencesIncrease},
		check{name: "ExpiredHolderYieldsToHigherFence", run: testExpiredHolder},
		check{name: "AbandonedLeaseAcquirableAfterTTL", run: testAbandoned},
		check{name: "AutoRenewHoldsPastTTL", run: testAutoRenew},
		check{name: "MaxHoldEndsLease", run: testMaxHold},
	)
}

func testFencesIncrease(t TB, e *env) {
	cs := []*fencelock.Client{e.client(), e.client(), e.client()}
	name := e.name("x")
	var prev fencelock.Fence
	for i := range 12 {
		e.waiting(fmt.Sprintf("grant %d of 12", i+1))
		l, err := cs[i%len(cs)].Acquire(e.ctx, name, opts(longTTL, true))
		mustNil(t, err, "Acquire")
		if i > 0 {
			e.checkFence(t, prev, l.Fence(), "sequential grants across clients")
		}
		prev = l.Fence()
		mustNil(t, l.Release(e.ctx), "Release")
	}
}

// testExpiredHolder: a holder that stops renewing loses the lease locally
// (Done, Err, Context) no later than the store can grant it again; the next
// holder gets a higher fence; the stale holder's Release and Extend return
// ErrLeaseLost and leave the new holder's lock intact.
func testExpiredHolder(t TB, e *env) {
	a, b, c := e.client(), e.client(), e.client()
	name := e.name("x")
	l1, err := a.TryAcquire(e.ctx, name, opts(e.ttl, false))
	mustNil(t, err, "TryAcquire")
	vu := l1.ValidUntil()
	e.waiting("Acquire by another client after the first holder stopped renewing")
	l2, err := b.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: e.effTTL() + e.margin})
	granted := time.Now()
	mustNil(t, err, "Acquire after the first holder stopped renewing")
	defer l2.Release(e.ctx)
	if granted.Before(vu) {
		t.Fatalf("second holder granted at %v, before the first lease's ValidUntil %v: two holders", granted.Sub(vu), vu)
	}
	e.checkFence(t, l1.Fence(), l2.Fence(), "grant after expiry")
	if !waitDone(l1, e.margin) {
		t.Fatalf("expired lease's Done not closed %v after its ValidUntil", time.Since(vu))
	}
	mustIs(t, l1.Err(), fencelock.ErrLeaseLost, "expired lease's Err")
	mustIs(t, context.Cause(l1.Context()), fencelock.ErrLeaseLost, "expired lease's Context cause")
	mustIs(t, l1.Extend(e.ctx, e.ttl), fencelock.ErrLeaseLost, "Extend of an expired lease")
	mustIs(t, l1.Release(e.ctx), fencelock.ErrLeaseLost, "Release of an expired lease")
	_, err = c.TryAcquire(e.ctx, name, nil)
	mustIs(t, err, fencelock.ErrNotAcquired, "TryAcquire after the stale Release (the stale holder removed the new holder's lock)")
	if l2.Err() != nil {
		t.Fatalf("new holder's lease ended after the stale Release: %v", l2.Err())
	}
}

// testAbandoned: a holder that vanishes without releasing (a crashed
// process: its client closed with no release, renewals stopped) blocks
// others only until its TTL runs out.
func testAbandoned(t TB, e *env) {
	b := e.client()
	name := e.name("x")
	a := e.client()
	// The TTL runs from when the store granted, which is before
	// TryAcquire returns: on a loaded machine its reply can come most of
	// a TTL later (a 400 ms lease on Redlock was once taken 62 ms after
	// TryAcquire returned). Counting from the request bounds the grant
	// from below whatever the reply's delay.
	start := time.Now()
	l1, err := a.TryAcquire(e.ctx, name, opts(e.ttl, false))
	mustNil(t, err, "TryAcquire")
	e.waiting("Acquire of the abandoned lock")
	l2, err := b.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: e.effTTL() + e.margin})
	mustNil(t, err, "Acquire of an abandoned lock")
	defer l2.Release(e.ctx)
	if took := time.Since(start); took < e.ttl/2 {
		t.Fatalf("abandoned lock granted %v after its TryAcquire was sent, before its TTL %v", took, e.ttl)
	}
	e.checkFence(t, l1.Fence(), l2.Fence(), "grant after abandonment")
}

func testAutoRenew(t TB, e *env) {
	a, b := e.client(), e.client()
	name := e.name("x")
	l, err := a.TryAcquire(e.ctx, name, opts(e.ttl, true))
	mustNil(t, err, "TryAcquire")
	defer l.Release(e.ctx)
	first := l.ValidUntil()
	// Holding past 3×TTL is the behaviour under test: a duration, not a sync.
	e.waiting("3×TTL to pass while the lease renews")
	e.sleep(3 * e.ttl)
	if l.Err() != nil {
		t.Fatalf("auto-renewed lease ended after 3×TTL: %v", l.Err())
	}
	if !l.ValidUntil().After(first) {
		t.Fatalf("ValidUntil did not move after renewals")
	}
	_, err = b.TryAcquire(e.ctx, name, nil)
	mustIs(t, err, fencelock.ErrNotAcquired, "TryAcquire of an auto-renewed lock past 3×TTL")
}

func testMaxHold(t TB, e *env) {
	a := e.client()
	maxHold := 2 * e.ttl
	start := time.Now()
	l, err := a.TryAcquire(e.ctx, e.name("x"), &fencelock.AcquireOptions{TTL: e.ttl, MaxHold: maxHold})
	e.waiting("the lease to end at MaxHold")
	mustNil(t, err, "TryAcquire with MaxHold")
	if !waitDone(l, maxHold+e.margin) {
		t.Fatalf("lease with MaxHold %v still held after %v", maxHold, time.Since(start))
	}
	if took := time.Since(start); took < maxHold-maxHold/10 {
		t.Fatalf("lease with MaxHold %v ended early, after %v: %v", maxHold, took, l.Err())
	}
	mustIs(t, l.Err(), fencelock.ErrLeaseLost, "Err after MaxHold")
}

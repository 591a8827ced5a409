package conformance

import (
	"context"
	"time"

	"github.com/fencelock/fencelock"
)

func init() {
	register(
		check{name: "TryAcquireFree", run: testTryAcquireFree},
		check{name: "TryAcquireHeld", run: testTryAcquireHeld},
		check{name: "ReleaseThenReacquire", run: testReleaseThenReacquire},
		check{name: "DoubleRelease", run: testDoubleRelease},
		check{name: "ExtendMovesDeadline", run: testExtend},
		check{name: "IndependentNames", run: testIndependentNames},
		check{name: "AwkwardNames", run: testAwkwardNames},
	)
}

func testTryAcquireFree(t TB, e *env) {
	c := e.client()
	name := e.name("x")
	before := time.Now()
	l, err := c.TryAcquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "TryAcquire on a free name")
	defer l.Release(e.ctx)
	if l.Name() != name {
		t.Errorf("Name() = %q, want %q", l.Name(), name)
	}
	if l.Fence() == 0 {
		t.Errorf("Fence() = 0: every grant carries a fence")
	}
	if e.caps.Fence < fencelock.FenceBestEffort || e.caps.Fence > fencelock.FenceStrict {
		t.Errorf("Capabilities().Fence = %v: declare how strong the fence is (FenceBestEffort, FenceTimeFloored or FenceStrict)", e.caps.Fence)
	}
	if l.Err() != nil {
		t.Errorf("Err() = %v on a held lease", l.Err())
	}
	select {
	case <-l.Done():
		t.Errorf("Done() closed on a held lease")
	default:
	}
	if vu := l.ValidUntil(); !vu.After(time.Now()) || vu.After(before.Add(longTTL)) {
		t.Errorf("ValidUntil %v not within (now, start+TTL]", vu)
	}
	if l.Context().Err() != nil {
		t.Errorf("Context() cancelled on a held lease")
	}
}

func testTryAcquireHeld(t TB, e *env) {
	a, b := e.client(), e.client()
	name := e.name("x")
	l, err := a.TryAcquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "first TryAcquire")
	defer l.Release(e.ctx)
	_, err = b.TryAcquire(e.ctx, name, nil)
	mustIs(t, err, fencelock.ErrNotAcquired, "TryAcquire by another client on a held name")
	_, err = a.TryAcquire(e.ctx, name, nil)
	mustIs(t, err, fencelock.ErrNotAcquired, "TryAcquire by the same client on a held name (locks are not re-entrant)")
}

func testReleaseThenReacquire(t TB, e *env) {
	a, b := e.client(), e.client()
	name := e.name("x")
	l1, err := a.TryAcquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "TryAcquire")
	mustNil(t, l1.Release(e.ctx), "Release")
	if !waitDone(l1, 0) {
		t.Fatalf("Done() not closed after Release")
	}
	mustIs(t, l1.Err(), fencelock.ErrReleased, "Err() after Release")
	mustIs(t, context.Cause(l1.Context()), fencelock.ErrReleased, "Context() cause after Release")
	l2, err := b.TryAcquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "TryAcquire by another client after Release")
	defer l2.Release(e.ctx)
	e.checkFence(t, l1.Fence(), l2.Fence(), "grant after release")
}

func testDoubleRelease(t TB, e *env) {
	c := e.client()
	l, err := c.TryAcquire(e.ctx, e.name("x"), opts(longTTL, true))
	mustNil(t, err, "TryAcquire")
	mustNil(t, l.Release(e.ctx), "first Release")
	mustNil(t, l.Release(e.ctx), "second Release (must be idempotent)")
	mustIs(t, l.Err(), fencelock.ErrReleased, "Err() after two Releases")
	mustIs(t, l.Extend(e.ctx, 0), fencelock.ErrReleased, "Extend after Release")
}

func testExtend(t TB, e *env) {
	c := e.client()
	l, err := c.TryAcquire(e.ctx, e.name("x"), opts(e.ttl, false))
	mustNil(t, err, "TryAcquire")
	defer l.Release(e.ctx)
	before := l.ValidUntil()
	sent := time.Now()
	mustNil(t, l.Extend(e.ctx, longTTL), "Extend to a long TTL")
	after := l.ValidUntil()
	if e.caps.ExtendHoldBound {
		// The store keeps the lock one hold bound (the session timeout the
		// lease was granted with, effTTL) past the Extend's send, however
		// long the TTL asked: ValidUntil must move forward, no further.
		if !after.After(before) || after.After(sent.Add(e.effTTL())) {
			t.Fatalf("ValidUntil moved from %v to %v after Extend(%v) sent at %v; want later, and at most the hold bound %v past the send", before, after, longTTL, sent, e.effTTL())
		}
		return
	}
	if !after.After(before.Add(longTTL / 2)) {
		t.Fatalf("ValidUntil moved from %v to %v after Extend(%v)", before, after, longTTL)
	}
	// The store keeps it past the old TTL.
	time.Sleep(e.ttl + e.ttl/2)
	if l.Err() != nil {
		t.Fatalf("lease ended after Extend: %v", l.Err())
	}
	_, err = e.client().TryAcquire(e.ctx, l.Name(), nil)
	mustIs(t, err, fencelock.ErrNotAcquired, "TryAcquire past the original TTL of an extended lease")
	mustIs(t, l.Extend(e.ctx, -time.Second), fencelock.ErrInvalid, "Extend with a negative TTL")
}

// testIndependentNames: holding one name does not block another, including
// names that are prefixes of each other or look like a backend's
// auxiliary keys (a fence key, a hash-tagged key). The second round uses
// clients without a prefix, so that the names are the store keys and no
// prefix shields a lock key from another name's auxiliary key.
func testIndependentNames(t TB, e *env) {
	related := func(base string) []string {
		return []string{base, base + "/sub", base + "/sub/deeper", base + ":fence", "{" + base + "}:fence", "{" + base + "}", base + "-x"}
	}
	e.independent(t, e.client(), e.client(), related(e.name("n")))
	raw := func() *fencelock.Client {
		c, err := e.h.MakeClient(e.ctx, &fencelock.Options{})
		mustNil(t, err, "MakeClient without a prefix")
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// Unique to this run all the same: the base is the prefixed key.
	e.independent(t, raw(), raw(), related(e.key(e.name("raw"))))
}

// independent takes names in order, alternating clients a and b, each
// while the earlier ones are held; releases them; then takes each again.
func (e *env) independent(t TB, a, b *fencelock.Client, names []string) {
	t.Helper()
	e.waiting("TryAcquire of related names")
	held := make([]*fencelock.Lease, 0, len(names))
	for i, n := range names {
		c := a
		if i%2 == 1 {
			c = b
		}
		l, err := c.TryAcquire(e.ctx, n, opts(longTTL, true))
		mustNil(t, err, "TryAcquire "+n+" while the other names are held")
		held = append(held, l)
	}
	for _, l := range held {
		mustNil(t, l.Release(e.ctx), "Release "+l.Name())
	}
	// And each can be taken again after release (no leftovers block it).
	for _, n := range names {
		l, err := b.TryAcquire(e.ctx, n, opts(longTTL, true))
		mustNil(t, err, "TryAcquire "+n+" after release")
		mustNil(t, l.Release(e.ctx), "Release "+n)
	}
}

func testAwkwardNames(t TB, e *env) {
	long := make([]byte, fencelock.MaxNameLen-len(e.prefix))
	for i := range long {
		long[i] = 'a' + byte(i%26)
	}
	names := []string{"ü/日本-" + e.name("u"), "/" + e.name("slash") + "/", e.name("sp ace\ttab"), e.name("*?[]%_'\"\\"), string(long)}
	a, b := e.client(), e.client()
	for _, n := range names {
		l, err := a.TryAcquire(e.ctx, n, opts(longTTL, true))
		mustNil(t, err, "TryAcquire awkward name "+n)
		_, err = b.TryAcquire(e.ctx, n, nil)
		mustIs(t, err, fencelock.ErrNotAcquired, "second TryAcquire of awkward name "+n)
		mustNil(t, l.Release(e.ctx), "Release awkward name "+n)
		l2, err := b.TryAcquire(e.ctx, n, opts(longTTL, true))
		mustNil(t, err, "re-acquire awkward name "+n)
		e.checkFence(t, l.Fence(), l2.Fence(), "re-acquire of "+n)
		mustNil(t, l2.Release(e.ctx), "Release awkward name "+n)
	}
}

package conformance

import (
	"context"
	"errors"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
)

func init() {
	register(
		check{name: "StoreSideLossSignalled", run: testStoreLoss},
		check{name: "SessionKillLosesLease", run: testSessionKill},
		check{name: "CloseReleasesAndEndsWaiters", run: testClose},
		check{name: "InvalidInput", run: testInvalidInput},
		check{name: "NoGoroutineLeaks", run: testNoLeaks},
	)
}

// testStoreLoss: when the store drops the lease (Expirer hook), Done,
// Err and Context report it within TTL + margin, and another client can
// take the lock with a higher fence.
func testStoreLoss(t TB, e *env) {
	x, ok := e.h.(Expirer)
	if !ok {
		t.Skipf("harness has no Expirer hook; loss by deadline is covered by ExpiredHolderYieldsToHigherFence")
	}
	a, b := e.client(), e.client()
	name := e.name("x")
	l, err := a.TryAcquire(e.ctx, name, opts(e.ttl, true))
	mustNil(t, err, "TryAcquire")
	mustNil(t, x.Expire(e.ctx, e.key(name)), "Expire")
	e.waiting("Done after the store dropped the lease")
	if !waitDone(l, e.ttl+e.margin) {
		t.Fatalf("Done not closed %v after the store dropped the lease", e.ttl+e.margin)
	}
	mustIs(t, l.Err(), fencelock.ErrLeaseLost, "Err after store-side loss")
	mustIs(t, context.Cause(l.Context()), fencelock.ErrLeaseLost, "Context cause after store-side loss")
	e.waiting("Acquire after store-side loss")
	l2, err := b.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: e.effTTL() + e.margin})
	mustNil(t, err, "Acquire after store-side loss")
	defer l2.Release(e.ctx)
	e.checkFence(t, l.Fence(), l2.Fence(), "grant after store-side loss")
	mustIs(t, l.Release(e.ctx), fencelock.ErrLeaseLost, "Release after store-side loss")
	if l2.Err() != nil {
		t.Fatalf("new holder's lease ended after the stale Release: %v", l2.Err())
	}
	if e.caps.LossSignal <= 0 {
		return
	}
	// The backend says its store signals loss: with AutoRenew off and a
	// long TTL, no renewal or deadline can end the lease; only the
	// store's signal, within the declared bound.
	bound := e.caps.LossSignal + promiseTol(e.caps.LossSignal)
	quiet := e.name("quiet")
	lq, err := a.TryAcquire(e.ctx, quiet, opts(longTTL, false))
	mustNil(t, err, "TryAcquire")
	dropped := time.Now()
	mustNil(t, x.Expire(e.ctx, e.key(quiet)), "Expire")
	e.waiting("Done of a lease with AutoRenew off after the store dropped it (signalled loss)")
	if !waitDone(lq, bound) {
		t.Fatalf("the store dropped a lease with AutoRenew off and the backend declares LossSignal %v, but Done did not close within %v", e.caps.LossSignal, bound)
	}
	t.Logf("signalled loss: Done %v after the drop began (declared LossSignal %v)", time.Since(dropped).Round(time.Millisecond), e.caps.LossSignal)
	mustIs(t, lq.Err(), fencelock.ErrLeaseLost, "Err after signalled store-side loss")
}

func testSessionKill(t TB, e *env) {
	k, ok := e.h.(SessionKiller)
	if !ok {
		t.Skipf("harness has no SessionKiller hook")
	}
	a, b := e.client(), e.client()
	name := e.name("x")
	l, err := a.TryAcquire(e.ctx, name, opts(e.ttl, true))
	mustNil(t, err, "TryAcquire")
	mustNil(t, k.KillSession(e.ctx, a), "KillSession")
	e.waiting("Acquire after the holder's session was killed")
	l2, err := b.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: 2*e.effTTL() + e.margin})
	mustNil(t, err, "Acquire after the holder's session was killed")
	defer l2.Release(e.ctx)
	e.checkFence(t, l.Fence(), l2.Fence(), "grant after session kill")
	e.waiting("the killed session's lease to end")
	within := e.ttl + e.margin
	if w := e.caps.LossSignal; w > 0 {
		// The store ended the session: a backend that declares it
		// signals loss reports it within the bound, not at ValidUntil.
		within = min(within, w+promiseTol(w))
	}
	if !waitDone(l, within) {
		t.Fatalf("lease not reported lost within %v after its session was killed and another client took the lock (declared LossSignal %v)", within, e.caps.LossSignal)
	}
	mustIs(t, l.Err(), fencelock.ErrLeaseLost, "Err after session kill")
}

func testClose(t TB, e *env) {
	a, b := e.client(), e.client()
	name := e.name("x")
	l, err := a.TryAcquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "TryAcquire")
	other := name + "-other"
	hb, err := b.TryAcquire(e.ctx, other, opts(longTTL, true))
	mustNil(t, err, "TryAcquire")
	defer hb.Release(e.ctx)
	waitErr := make(chan error, 1)
	go func() {
		_, err := a.Acquire(e.ctx, other, nil) // blocks behind b's hold
		waitErr <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it start waiting; either way Close must end it
	e.waiting("Close of a client with a lease and a waiting Acquire")
	mustNil(t, a.Close(), "Close")
	if !waitDone(l, e.margin) {
		t.Fatalf("lease held through a closed client did not end")
	}
	mustIs(t, l.Err(), fencelock.ErrLeaseLost, "Err of a lease whose client closed")
	mustIs(t, l.Err(), fencelock.ErrClosed, "Err of a lease whose client closed")
	select {
	case err := <-waitErr:
		mustIs(t, err, fencelock.ErrClosed, "Acquire waiting when its client closed")
	case <-time.After(e.margin):
		t.Fatalf("Acquire still waiting %v after its client closed", e.margin)
	}
	// Close released the lock in the store.
	l2, err := b.TryAcquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "TryAcquire of a lock whose client closed")
	_ = l2.Release(e.ctx)
	_, err = a.TryAcquire(e.ctx, name, nil)
	mustIs(t, err, fencelock.ErrClosed, "TryAcquire after Close")
	_, err = a.Acquire(e.ctx, name, nil)
	mustIs(t, err, fencelock.ErrClosed, "Acquire after Close")
	mustIs(t, a.Close(), fencelock.ErrClosed, "second Close")
}

func testInvalidInput(t TB, e *env) {
	c := e.client()
	long := string(make([]byte, fencelock.MaxNameLen+1))
	cases := []struct {
		what string
		name string
		o    *fencelock.AcquireOptions
	}{
		{"empty name", "", nil},
		{"name over 1 KiB", long, nil},
		{"invalid UTF-8", "bad\xffname", nil},
		{"NUL byte", "a\x00b", nil},
		{"negative TTL", "x", &fencelock.AcquireOptions{TTL: -time.Second}},
		{"TTL over MaxTTL", "x", &fencelock.AcquireOptions{TTL: fencelock.MaxTTL + time.Hour}},
		{"negative Wait", "x", &fencelock.AcquireOptions{Wait: -time.Second}},
		{"negative MaxHold", "x", &fencelock.AcquireOptions{MaxHold: -time.Second}},
	}
	if m := e.caps.MinTTL; m > time.Nanosecond {
		cases = append(cases, struct {
			what string
			name string
			o    *fencelock.AcquireOptions
		}{"TTL below MinTTL", "x", &fencelock.AcquireOptions{TTL: m - 1}})
	}
	for _, tc := range cases {
		_, err := c.TryAcquire(e.ctx, tc.name, tc.o)
		mustIs(t, err, fencelock.ErrInvalid, "TryAcquire with "+tc.what)
		_, err = c.Acquire(e.ctx, tc.name, tc.o)
		mustIs(t, err, fencelock.ErrInvalid, "Acquire with "+tc.what)
		var fe *fencelock.Error
		if !errors.As(err, &fe) || len(err.Error()) < 20 {
			t.Errorf("%s: want a *fencelock.Error with a message saying what to do, got %v", tc.what, err)
		}
	}
}

// testNoLeaks: a client's goroutines (renewal, waits, watches, pub/sub)
// all end after Release and Close.
func testNoLeaks(t TB, e *env) {
	before := goleak.IgnoreCurrent()
	func() {
		a, err := e.h.MakeClient(e.ctx, &fencelock.Options{Prefix: e.prefix})
		mustNil(t, err, "MakeClient")
		b, err := e.h.MakeClient(e.ctx, &fencelock.Options{Prefix: e.prefix})
		mustNil(t, err, "MakeClient")
		name := e.name("x")
		l, err := a.TryAcquire(e.ctx, name, opts(e.ttl, true))
		mustNil(t, err, "TryAcquire")
		got := make(chan error, 1)
		go func() {
			l2, err := b.Acquire(e.ctx, name, opts(e.ttl, true))
			if err == nil {
				err = l2.Release(e.ctx)
			}
			got <- err
		}()
		time.Sleep(e.ttl / 2)
		mustNil(t, l.Release(e.ctx), "Release")
		e.waiting("the waiter's Acquire after Release")
		select {
		case err := <-got:
			mustNil(t, err, "waiter")
		case <-e.ctx.Done():
			t.Fatalf("waiter still blocked at the check's end")
		}
		// A lease left held is released by Close.
		_, err = a.TryAcquire(e.ctx, name+"-left", opts(e.ttl, true))
		mustNil(t, err, "TryAcquire")
		mustNil(t, a.Close(), "Close")
		mustNil(t, b.Close(), "Close")
	}()
	ignore := []goleak.Option{before}
	if f, ok := e.h.(LeakFilter); ok {
		ignore = append(ignore, f.IgnoreGoroutines()...)
	}
	deadline := time.Now().Add(5 * time.Second)
	e.waiting("the clients' goroutines to end after Release and Close")
	for {
		err := goleak.Find(ignore...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left after Release and Close: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

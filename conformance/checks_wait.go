package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
)

func init() {
	register(
		check{name: "AcquireWakesOnRelease", run: testAcquireWakesOnRelease},
		check{name: "AcquireWaitBound", run: testAcquireWaitBound},
		check{name: "CancelledWaitLeavesNothingHeld", run: testCancelledWait},
		check{name: "CancelRacingRelease", run: testCancelRacingRelease},
		check{name: "MutualExclusion", run: testMutualExclusion},
	)
}

// testAcquireWakesOnRelease: a blocked Acquire returns after the holder
// releases, long before the holder's TTL could have run out.
func testAcquireWakesOnRelease(t TB, e *env) {
	a, b := e.client(), e.client()
	name := e.name("x")
	l1, err := a.TryAcquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "TryAcquire")
	type res struct {
		l   *fencelock.Lease
		err error
		at  time.Time
	}
	got := make(chan res, 1)
	waiting := make(chan struct{})
	go func() {
		close(waiting)
		l, err := b.Acquire(e.ctx, name, opts(longTTL, true))
		got <- res{l, err, time.Now()}
	}()
	<-waiting
	select {
	case r := <-got:
		t.Fatalf("Acquire returned while the lock was held: %v", r.err)
	case <-time.After(e.ttl):
	}
	released := time.Now()
	mustNil(t, l1.Release(e.ctx), "Release")
	// Far less than the holder's TTL, far more than a backoff interval.
	wake := max(5*time.Second, 2*e.margin)
	e.waiting("the blocked Acquire to return after Release")
	select {
	case r := <-got:
		mustNil(t, r.err, "blocked Acquire after Release")
		defer r.l.Release(e.ctx)
		e.checkFence(t, l1.Fence(), r.l.Fence(), "hand-off")
		t.Logf("hand-off took %v", r.at.Sub(released))
	case <-time.After(wake):
		t.Fatalf("blocked Acquire did not return within %v of Release (TTL %v)", wake, longTTL)
	}
}

func testAcquireWaitBound(t TB, e *env) {
	a, b := e.client(), e.client()
	name := e.name("x")
	l, err := a.TryAcquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "TryAcquire")
	defer l.Release(e.ctx)
	wait := 300 * time.Millisecond
	start := time.Now()
	_, err = b.Acquire(e.ctx, name, &fencelock.AcquireOptions{Wait: wait})
	took := time.Since(start)
	mustIs(t, err, fencelock.ErrNotAcquired, "Acquire with Wait on a held name")
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the Wait bound must not look like the caller's deadline: %v", err)
	}
	if took < wait-wait/10 || took > wait+e.margin {
		t.Errorf("Acquire with Wait %v returned after %v", wait, took)
	}
	if l.Err() != nil {
		t.Errorf("holder's lease ended: %v", l.Err())
	}
}

// testCancelledWait: cancelled and deadlined waits return the ctx error
// and leave nothing held.
func testCancelledWait(t TB, e *env) {
	a, b, c := e.client(), e.client(), e.client()
	name := e.name("x")
	l, err := a.TryAcquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "TryAcquire")

	ctx, cancel := context.WithCancel(e.ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = b.Acquire(ctx, name, nil)
	mustIs(t, err, context.Canceled, "Acquire with a cancelled ctx")

	dctx, dcancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
	defer dcancel()
	_, err = b.Acquire(dctx, name, nil)
	mustIs(t, err, context.DeadlineExceeded, "Acquire past its ctx deadline")

	done, dcancel2 := context.WithCancel(e.ctx)
	dcancel2()
	_, err = b.TryAcquire(done, name, nil)
	mustIs(t, err, context.Canceled, "TryAcquire with an already cancelled ctx")

	mustNil(t, l.Release(e.ctx), "Release")
	l2, err := c.TryAcquire(e.ctx, name, opts(longTTL, true))
	mustNil(t, err, "TryAcquire after the cancelled waiters gave up (something was left held)")
	mustNil(t, l2.Release(e.ctx), "Release")
}

// testCancelRacingRelease: a waiter cancelled at the moment the holder
// releases either gets the lease or leaves nothing held.
func testCancelRacingRelease(t TB, e *env) {
	a, b, c := e.client(), e.client(), e.client()
	name := e.name("x")
	for i := range 10 {
		l, err := a.Acquire(e.ctx, name, opts(longTTL, true))
		mustNil(t, err, "Acquire")
		ctx, cancel := context.WithCancel(e.ctx)
		got := make(chan error, 1)
		go func() {
			l2, err := b.Acquire(ctx, name, opts(longTTL, true))
			if err == nil {
				err = l2.Release(e.ctx)
			}
			got <- err
		}()
		time.Sleep(time.Duration(i) * 5 * time.Millisecond) // spread the race over the wait
		go func() { _ = l.Release(e.ctx) }()
		cancel()
		e.waiting(fmt.Sprintf("round %d: the cancelled waiter to return", i))
		if err := <-got; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: waiter cancelled during release: %v", i, err)
		}
		e.waiting(fmt.Sprintf("round %d: Acquire by a third client after the cancelled waiter", i))
		l3, err := c.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: e.margin})
		mustNil(t, err, fmt.Sprintf("round %d: Acquire after a cancelled waiter (something was left held)", i))
		mustNil(t, l3.Release(e.ctx), "Release")
	}
}

// testMutualExclusion: N clients × M goroutines; at most one inside.
func testMutualExclusion(t TB, e *env) {
	const clients, workers = 3, 3
	iters := 10
	if e.caps.MinTTL >= time.Second {
		iters = 5
	}
	var inside, maxInside, total atomic.Int64
	var wg sync.WaitGroup
	var last atomic.Uint64
	var errs errList
	name := e.name("x")
	e.waiting(fmt.Sprintf("%d×%d workers taking %q %d times each", clients, workers, name, iters))
	for range clients {
		c := e.client()
		for range workers {
			wg.Go(func() {
				for range iters {
					l, err := c.Acquire(e.ctx, name, opts(longTTL, true))
					if err != nil {
						errs.add(err)
						return
					}
					n := inside.Add(1)
					for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
					}
					if f, prev := l.Fence(), fencelock.Fence(last.Swap(uint64(l.Fence()))); f <= prev {
						errs.addf("fence %d granted after fence %d", f, prev)
					}
					total.Add(1)
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					if err := l.Release(e.ctx); err != nil {
						errs.add(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	errs.report(t, "worker")
	if m := maxInside.Load(); m != 1 {
		t.Errorf("at most one holder expected inside, saw %d", m)
	}
	if got, want := total.Load(), int64(clients*workers*iters); got != want {
		t.Errorf("%d sections ran, want %d", got, want)
	}
}

package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
)

func init() {
	register(
		check{name: "HighVolumeExclusion", run: testHighVolume},
		check{name: "CancelledTryAcquireLeavesNothingHeld", run: testCancelledTry},
	)
}

// High-volume exclusion targets: the check runs until it has seen this many
// refused attempts and grants (or its time budget ends). A driver that
// wrongly grants one refused attempt in 30 makes about 170 second grants
// in 5000 refused attempts; each is seen as two holders inside unless it
// lands in the few microseconds a holder spends between the store and the
// "inside" flag, so the check catches it with near certainty.
const (
	volumeRefused = 5000
	volumeGrants  = 200
)

// testHighVolume: several clients hammer one lock with TryAcquire (and
// some block in Acquire); at most one holder is ever inside, and fences
// increase with every grant.
func testHighVolume(t TB, e *env) {
	const clients, hammers, blockers = 4, 2, 1
	budget := min(20*time.Second, e.left()/2)
	ctx, stop := context.WithTimeout(e.ctx, budget)
	defer stop()
	v := &volumeRun{e: e, name: e.name("x"), ctx: ctx, stop: stop}
	e.waiting(fmt.Sprintf("%d clients hammering %q (until %d refused attempts and %d grants, or %v)", clients, v.name, volumeRefused, volumeGrants, budget))
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		c := e.client()
		for range hammers {
			wg.Go(func() { v.hammer(c) })
		}
		for range blockers {
			wg.Go(func() { v.block(c) })
		}
	}
	wg.Wait()
	v.errs.report(t, "high-volume exclusion")
	if n := v.doubles.Load(); n > 0 {
		t.Errorf("%d of %d grants came while another holder was inside (%d refused attempts): the store granted a held lock", n, v.grants.Load(), v.refused.Load())
	}
	took := time.Since(start).Round(time.Millisecond)
	t.Logf("%d grants, %d refused attempts, %d Acquire waits elapsed, in %v", v.grants.Load(), v.refused.Load(), v.waitsElapsed.Load(), took)
	if v.refused.Load() < 300 || v.grants.Load() < 30 {
		t.Errorf("only %d refused attempts and %d grants in %v: too few to detect a rare second grant", v.refused.Load(), v.grants.Load(), took)
	}
}

// volumeRun is one run of testHighVolume: its clients' goroutines share
// it.
type volumeRun struct {
	e    *env
	name string
	ctx  context.Context // ends with the budget, or once enough was seen
	stop context.CancelFunc

	inside                                 atomic.Int32 // holders inside their critical section
	refused, grants, doubles, waitsElapsed atomic.Int64
	errs                                   errList

	fenceMu   sync.Mutex
	lastFence fencelock.Fence
}

// enough reports whether the run has seen enough refused attempts and
// grants.
func (v *volumeRun) enough() bool {
	return v.refused.Load() >= volumeRefused && v.grants.Load() >= volumeGrants
}

// hammer calls TryAcquire on c until the run ends.
func (v *volumeRun) hammer(c *fencelock.Client) {
	for v.ctx.Err() == nil {
		l, err := c.TryAcquire(v.ctx, v.name, opts(longTTL, false))
		switch {
		case err == nil:
			v.section(l)
		case errors.Is(err, fencelock.ErrNotAcquired):
			if v.refused.Add(1) >= volumeRefused && v.enough() {
				v.stop()
			}
			// A short random pause: hammering, not starving
			// the holder of CPU on a small machine.
			time.Sleep(time.Duration(rand.Int64N(int64(200 * time.Microsecond))))
		case v.ctx.Err() == nil:
			v.errs.addf("TryAcquire: %v", err)
			return
		}
	}
}

// block calls Acquire on c, waiting up to the env's margin, until the run
// ends.
func (v *volumeRun) block(c *fencelock.Client) {
	for v.ctx.Err() == nil {
		l, err := c.Acquire(v.ctx, v.name, &fencelock.AcquireOptions{TTL: longTTL, AutoRenew: fencelock.Bool(false), Wait: v.e.margin})
		switch {
		case err == nil:
			v.section(l)
		case errors.Is(err, fencelock.ErrNotAcquired):
			v.waitsElapsed.Add(1)
		case v.ctx.Err() == nil:
			v.errs.addf("Acquire: %v", err)
			return
		}
	}
}

// section runs one critical section of l and releases it.
func (v *volumeRun) section(l *fencelock.Lease) {
	v.grants.Add(1)
	if !v.inside.CompareAndSwap(0, 1) {
		v.doubles.Add(1)
		v.errs.addf("fence %d granted while another holder was inside", l.Fence())
	} else {
		v.fenceMu.Lock()
		if f := l.Fence(); f <= v.lastFence {
			v.errs.addf("fence %d granted after fence %d", f, v.lastFence)
		} else {
			v.lastFence = f
		}
		v.fenceMu.Unlock()
		time.Sleep(100 * time.Microsecond)
		v.inside.Store(0)
	}
	if err := l.Release(context.WithoutCancel(v.ctx)); err != nil {
		v.errs.addf("Release: %v", err)
	}
	if v.enough() {
		v.stop()
	}
}

// testCancelledTryAcquire: a TryAcquire whose ctx ends while the request is
// in flight either grants the lease or returns the ctx error and leaves
// nothing held (the driver removes an ambiguous grant before it returns).
// The ctx deadlines sweep 0 to 2× the measured median TryAcquire time, so
// that many of them end while the request or its reply is on the way.
func testCancelledTry(t TB, e *env) {
	a, b := e.client(), e.client()
	name := e.name("x")
	e.waiting("TryAcquire latency measurement")
	var lat []time.Duration
	for range 7 {
		t0 := time.Now()
		l, err := a.TryAcquire(e.ctx, name, opts(longTTL, false))
		lat = append(lat, time.Since(t0))
		mustNil(t, err, "uncontended TryAcquire")
		mustNil(t, l.Release(e.ctx), "Release")
	}
	med := Percentile(lat, 0.5)
	const rounds = 40
	cancelled, unavailable := 0, 0
	for i := range rounds {
		d := time.Duration(int64(2*med) * int64(i) / rounds)
		e.waiting(fmt.Sprintf("round %d: TryAcquire with a %v ctx deadline", i, d))
		ctx, cancel := context.WithTimeout(e.ctx, d)
		l, err := a.TryAcquire(ctx, name, opts(longTTL, false))
		cancel()
		if err == nil {
			mustNil(t, l.Release(e.ctx), "Release")
			continue
		}
		cancelled++
		switch {
		case errors.Is(err, context.DeadlineExceeded):
		case errors.Is(err, fencelock.ErrUnavailable), errors.Is(err, fencelock.ErrIndeterminate):
			// The store's client gave up on the same deadline a moment
			// before ctx reported it (gRPC and dialers time out on their
			// own clocks): acceptable, if nothing is left held.
			unavailable++
		default:
			t.Errorf("round %d: TryAcquire with a %v ctx deadline: got %v, want an error matching context.DeadlineExceeded (or ErrUnavailable)", i, d, err)
		}
		l2, err2 := b.TryAcquire(e.ctx, name, opts(longTTL, false))
		if errors.Is(err2, fencelock.ErrNotAcquired) {
			t.Fatalf("round %d: TryAcquire with a %v ctx deadline (median call %v) returned %v and left the lock held (another client's TryAcquire: %v)", i, d, med, err, err2)
		}
		mustNil(t, err2, "TryAcquire after a cancelled TryAcquire")
		mustNil(t, l2.Release(e.ctx), "Release")
	}
	t.Logf("median TryAcquire %v; %d of %d attempts ended by their ctx deadline (%d of them as ErrUnavailable, not matching DeadlineExceeded) and left nothing held", med, cancelled, rounds, unavailable)
}

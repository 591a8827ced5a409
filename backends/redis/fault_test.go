package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/faultrec"
	"github.com/fencelock/fencelock/internal/faulttest"
	"github.com/fencelock/fencelock/internal/testserver"
)

// margin is the slack allowed for timing assertions on a loaded machine.
const margin = 500 * time.Millisecond

// TestFaultServerPaused: redis-server frozen (SIGSTOP) while a lease is
// held. Renewals fail, the lease reports itself lost by its validity
// deadline, and acquires end with the caller's ctx error or ErrUnavailable
// instead of hanging; attempts abandoned meanwhile grant nothing later.
func TestFaultServerPaused(t *testing.T) {
	rec := faultrec.Begin(t, faultrec.Result{Backend: "redis", Scenario: faultrec.PrimaryLost, Case: "the only server frozen"})
	r := testserver.StartRedisProcess(t)
	ctx := t.Context()
	c := open(t, r.URL(), nil, nil)
	// A client that relies on go-redis timeouts, not on a ctx deadline.
	short := open(t, r.URL(), nil, func(o *goredis.UniversalOptions) { o.ReadTimeout = 200 * time.Millisecond })
	n := name(t)
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Proc.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := r.Proc.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer resume()
	paused := time.Now()

	// The lease ends by its validity deadline (it cannot move now).
	vu := l.ValidUntil()
	select {
	case <-l.Done():
	case <-time.After(time.Until(vu) + margin):
		t.Fatalf("lease still held %v after its ValidUntil with the server frozen", time.Since(vu))
	}
	lostAt := time.Now()
	if lostAt.Before(vu) {
		t.Fatalf("lease ended %v before its ValidUntil although nothing said it was lost", vu.Sub(lostAt))
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("lease Err = %v, want ErrLeaseLost", l.Err())
	}
	rec.Outcome = faultrec.Lost

	// TryAcquire bounded by ctx: the ctx error, then the abandon of the
	// attempt (bounded by the TTL) fails too: ErrIndeterminate.
	const ttl = 500 * time.Millisecond
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.TryAcquire(tctx, n+"-try", &fencelock.AcquireOptions{TTL: ttl})
	cancel()
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrIndeterminate) {
		t.Errorf("TryAcquire on a frozen server: %v, want DeadlineExceeded and ErrIndeterminate", err)
	}
	if took > 300*time.Millisecond+ttl+margin {
		t.Errorf("TryAcquire on a frozen server took %v", took)
	}

	// Blocking Acquire bounded by ctx.
	start = time.Now()
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Acquire(actx, n+"-acq", &fencelock.AcquireOptions{TTL: ttl})
	cancel()
	took = time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire on a frozen server: %v, want DeadlineExceeded", err)
	}
	if took > 300*time.Millisecond+ttl+margin {
		t.Errorf("Acquire on a frozen server took %v", took)
	}

	// No ctx deadline: go-redis's ReadTimeout (200ms, 3 retries) ends it.
	start = time.Now()
	_, err = short.TryAcquire(context.Background(), n+"-short", &fencelock.AcquireOptions{TTL: ttl})
	took = time.Since(start)
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Errorf("TryAcquire without a deadline on a frozen server: %v, want ErrUnavailable", err)
	}
	if took > 4*(200*time.Millisecond+512*time.Millisecond)+ttl+margin {
		t.Errorf("TryAcquire without a deadline on a frozen server took %v", took)
	}
	t.Logf("frozen at %s; lease lost %v after freeze (%v after ValidUntil); unavailable error after %v: %v",
		paused.Format("15:04:05.000"), lostAt.Sub(paused).Round(time.Millisecond), lostAt.Sub(vu).Round(time.Millisecond), took.Round(time.Millisecond), err)

	// Thaw: the requests stuck in the server's buffers run now, in any
	// order with their abandons; none may leave a lock held.
	resume()
	rc := native(t, c)
	stray := false
	for _, k := range []string{n + "-try", n + "-acq", n + "-short"} {
		if err := rc.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := rc.Get(ctx, k).Result(); !errors.Is(err, goredis.Nil) {
			stray = true
			t.Errorf("after thaw, %s holds %q (%v): an abandoned attempt granted a lock", k, v, err)
		}
	}
	rec.SecondHolder = faultrec.OverlapOf(stray)
	if !errors.Is(l.Release(ctx), fencelock.ErrLeaseLost) {
		t.Errorf("Release of the lost lease: want ErrLeaseLost")
	}
	l2, err := c.Acquire(ctx, n, &fencelock.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	rec.Fence = faultrec.FenceOf(l.Fence(), l2.Fence())
	rec.Note = fmt.Sprintf("the only server frozen (SIGSTOP): the lease ended %v after the freeze, at its ValidUntil; acquires failed with the ctx error or ErrUnavailable (%v without a deadline); none left a lock after the thaw",
		lostAt.Sub(paused).Round(time.Millisecond), took.Round(time.Millisecond))
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after the freeze, not above %d", l2.Fence(), l.Fence())
	}
}

// TestFaultRestartEmpty: redis-server killed and restarted with no data.
// The lease held across the crash reports itself lost, and the next fence
// is still above every earlier one although the counter is gone.
func TestFaultRestartEmpty(t *testing.T) {
	rec := faultrec.Begin(t, faultrec.Result{Backend: "redis", Scenario: faultrec.ServerRestarted, Case: "restarted empty"})
	r := testserver.StartRedisProcess(t)
	ctx := t.Context()
	c := open(t, r.URL(), nil, nil)
	rc := native(t, c)
	n := name(t)
	var last fencelock.Fence
	for range 5 {
		l, err := c.Acquire(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d not above %d", l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := c.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	last = held.Fence()

	if err := r.Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := r.Proc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := rc.Get(ctx, "{"+n+"}:fence").Result(); !errors.Is(err, goredis.Nil) {
		t.Fatalf("fence key after restart = %q (%v), want none: the server did not restart empty", v, err)
	}
	// The held lease's next renewal (TTL/3) finds its key gone.
	select {
	case <-held.Done():
	case <-time.After(900*time.Millisecond + margin):
		t.Fatalf("lease held across a restart that lost it not reported lost after %v", time.Since(killed))
	}
	lostAfter := time.Since(killed)
	if !errors.Is(held.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("lease Err = %v, want ErrLeaseLost", held.Err())
	}
	rec.Outcome = faultrec.Lost
	l, err := c.Acquire(ctx, n, &fencelock.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	rec.WaitGranted, rec.WaitFrom = time.Since(killed), "SIGKILL"
	rec.Fence = faultrec.FenceOf(last, l.Fence())
	rec.Note = fmt.Sprintf("killed and restarted empty (no persistence): the held lease was reported lost %v after the kill (next renewal); the fence counter was gone, the time floor kept fences rising", lostAfter.Round(time.Millisecond))
	if l.Fence() <= last {
		t.Fatalf("fence %d after an empty restart, not above the earlier %d (a bare counter would restart at 1)", l.Fence(), last)
	}
	t.Logf("last fence before the crash %d, first after the empty restart %d (+%v)", last, l.Fence(), time.Duration(l.Fence()-last)*time.Microsecond)
}

// TestFaultClientPartitioned: the holder's client cut off from the server
// (a paused proxy: connections stay open, no byte moves) while another
// client waits. The holder's renewals cannot arrive: its lease ends at its
// ValidUntil; the server expires the key after the TTL and the waiter is
// granted, after the holder's lease ended, with a higher fence; the stale
// holder's fenced write is rejected; after the heal its Release is
// ErrLeaseLost and leaves the new holder's lock alone.
func TestFaultClientPartitioned(t *testing.T) {
	r := testserver.StartRedis(t)
	if r.Addr() == "" {
		testserver.SkipExternal(t, "REDIS_URL names an existing server: the test needs a proxy in front of its own")
	}
	proxy, err := testserver.NewEtcdProxy(r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	const ttl = time.Second
	faulttest.ClientPartitioned(t, faulttest.Partition{
		Backend: "redis",
		Cut:     open(t, "redis://"+proxy.Addr()+"/0", nil, nil),
		Other:   open(t, r.URL(), nil, nil),
		Pause:   proxy.Pause, Resume: proxy.Resume,
		Name: name(t), TTL: ttl,
		LostWithin: ttl + margin, GrantWithin: 3*ttl + margin,
		Story: "holder behind a paused proxy, TTL %v: its lease ended locally %v after the cut; the server expired the key and the waiter was granted %v after the cut; the stale holder's fenced write was rejected",
	})
}

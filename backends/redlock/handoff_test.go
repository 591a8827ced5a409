package redlock_test

import (
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redlock"
)

// TestHandOffToDeadWaiterTakenOver: the release of a contended lease
// (granted to an Acquire that had to wait) hands the lock to the first
// waiter in the lead primary's queue and leaves its keys on the other
// primaries for that waiter to take over. When that waiter never comes
// (its Client died), the next waiter's ordered attempt learns the
// released token from the lead and takes those keys over: it gets the
// lock once the dead waiter's place ends, not after the released lease's
// TTL.
func TestHandOffToDeadWaiterTakenOver(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	n := name(t)
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	var rcs []*goredis.Client
	for _, a := range m.Addrs() {
		rc := goredis.NewClient(&goredis.Options{Addr: a})
		t.Cleanup(func() { _ = rc.Close() })
		rcs = append(rcs, rc)
	}
	queued := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := rcs[0].ZCard(ctx, redlock.QueueKey(n)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters queued on the lead, want %d", got, want)
			}
			time.Sleep(time.Millisecond)
		}
	}

	// A's lease is contended: A's Acquire waited for c0's.
	c0, ca, cc := open(t, m.URL(), nil), open(t, m.URL(), nil), open(t, m.URL(), nil)
	l0, err := c0.TryAcquire(ctx, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan *fencelock.Lease, 1)
	go func() {
		l, err := ca.Acquire(ctx, n, opts)
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	queued(1)
	if err := l0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	la := <-granted
	if la == nil {
		t.FailNow()
	}
	redlock.Idle(ca) // A's calls to every primary have landed
	tokenA, err := rcs[1].Get(ctx, n).Result()
	if err != nil {
		t.Fatal(err)
	}

	// A dead waiter first in line (its place ends in 300 ms), then C.
	dead := "deadbeefdeadbeefdeadbeefdeadbeef.1"
	queueWaiter(t, ctx, rcs[0], n, dead, 1, 300)
	cDone := make(chan error, 1)
	var lc *fencelock.Lease
	go func() {
		l, err := cc.Acquire(ctx, n, opts)
		lc = l
		cDone <- err
	}()
	queued(3) // A (holding), the dead waiter, C
	start := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The lead handed the lock to the dead waiter: A's keys on the other
	// primaries were left for it.
	for i := 1; i < len(rcs); i++ {
		v, err := rcs[i].Get(ctx, n).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			t.Fatal(err)
		}
		if v != tokenA {
			t.Fatalf("primary %d holds %q right after A's release, want A's token %q left for the waiter it was handed to", i, v, tokenA)
		}
	}
	select {
	case err := <-cDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("C not granted %v after A's release handed the lock to a dead waiter (whose place ends after 300 ms)", time.Since(start).Round(time.Millisecond))
	}
	redlock.Idle(cc)
	tokenC, err := rcs[0].Get(ctx, n).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, rc := range rcs {
		if v, _ := rc.Get(ctx, n).Result(); v != tokenC {
			t.Errorf("primary %d holds %q, want C's token %q", i, v, tokenC)
		}
	}
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

package redlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redlock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestHandOffToDeadWaiterTakenOver: the release of a contended lease
// (granted to an Acquire that had to wait) hands the lock to the first
// waiter in the lead primary's queue and leaves its keys on the other
// primaries for that waiter to take over. When that waiter never comes
// (its Client died), the next waiter's ordered attempt learns the
// released token from the lead and takes those keys over: it gets the
// lock once the dead waiter's place ends, not after the released lease's
// TTL. A release that finds the lead slow (a loaded machine) releases
// every primary at once instead: then the round is run again, on
// another name.
func TestHandOffToDeadWaiterTakenOver(t *testing.T) {
	m := nodes(t, 5, nil)
	for try := 1; ; try++ {
		if handOffToDeadWaiter(t, m, fmt.Sprintf("%s-%d", name(t), try)) {
			return
		}
		t.Logf("try %d: the release did not hand off (a slow lead)", try)
		if try == 5 {
			t.Fatal("no release handed off in 5 tries")
		}
	}
}

// handOffToDeadWaiter runs TestHandOffToDeadWaiterTakenOver on lock n;
// false: A's release did not hand off.
func handOffToDeadWaiter(t *testing.T, m *testserver.RedisNodes, n string) bool {
	ctx := t.Context()
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
	defer func() { _ = c0.Close(); _ = ca.Close(); _ = cc.Close() }()
	redlock.Idle(ca) // A's calls to every primary have landed
	tokenA, err := rcs[0].Get(ctx, n).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		t.Fatal(err)
	}
	var holdsA []int // the other primaries where A's grant landed
	for i := 1; i < len(rcs); i++ {
		if v, _ := rcs[i].Get(ctx, n).Result(); v == tokenA {
			holdsA = append(holdsA, i)
		}
	}
	if tokenA == "" || len(holdsA) < len(rcs)/2 {
		// A was granted without the lead (it was slow): its release
		// cannot hand off.
		_ = la.Release(ctx)
		return false
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
	redlock.Idle(ca) // a release that did not hand off has reached every primary
	// The lead handed the lock to the dead waiter: A's keys on the other
	// primaries were left for it (or, after a slow lead, released).
	left := 0
	for _, i := range holdsA {
		v, err := rcs[i].Get(ctx, n).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			t.Fatal(err)
		}
		if v == tokenA {
			left++
		}
	}
	handedOff := left == len(holdsA)
	if left > 0 && !handedOff {
		t.Fatalf("%d of the %d other primaries A held still hold A's token right after its release: want all (handed off) or none (released)", left, len(holdsA))
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
	return handedOff
}

package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redlock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/guard"
	"github.com/fencelock/fencelock/internal/faultrec"
	"github.com/fencelock/fencelock/internal/testserver"
)

// counters returns each primary's fence counter for lock key k (0: none).
func counters(t *testing.T, ctx context.Context, m *testserver.RedisNodes, k string) []fencelock.Fence {
	t.Helper()
	cs := make([]fencelock.Fence, len(m.Nodes))
	for i, n := range m.Nodes {
		v, err := n.Do(ctx, "GET", redlock.FenceKey(k))
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := v.(string); ok {
			f, _ := strconv.ParseUint(s, 10, 64)
			cs[i] = fencelock.Fence(f)
		}
	}
	return cs
}

// TestFenceQuorumIntersection checks the fence property described atop redlock.go
// on real primaries: in every round a different majority grants (the
// others are held by a stranger's key, as by a competing client), and a
// random primary's counter is pushed far ahead, so that the granting
// primaries disagree and the fence must be written back. After every
// grant a majority stores at least the lease's fence, and fences strictly
// increase from round to round although no round's majority is the last
// one's.
func TestFenceQuorumIntersection(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	n := name(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var last fencelock.Fence
	writeBacks := 0
	for round := range 60 {
		// Two primaries refuse this round.
		perm := rng.Perm(5)
		blocked := perm[:2]
		for _, i := range blocked {
			if _, err := m.Nodes[i].Do(ctx, "SET", n, "stranger", "PX", "60000"); err != nil {
				t.Fatal(err)
			}
		}
		// Now and then, one primary's counter runs far ahead (as if it
		// alone had seen many grants).
		if round%3 == 0 {
			i := perm[2+rng.IntN(3)]
			ahead := max(last, counters(t, ctx, m, n)[i]) + fencelock.Fence(1000+rng.IntN(1000))
			if _, err := m.Nodes[i].Do(ctx, "SET", redlock.FenceKey(n), ahead.String()); err != nil {
				t.Fatal(err)
			}
		}
		before := counters(t, ctx, m, n)
		l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)})
		if err != nil {
			t.Fatalf("round %d, primaries %v blocked: %v", round, blocked, err)
		}
		f := l.Fence()
		if f <= last {
			t.Fatalf("round %d: fence %d not above the previous %d", round, f, last)
		}
		redlock.Idle(c)
		after := counters(t, ctx, m, n)
		stored, differ := 0, false
		for i := range after {
			if after[i] >= f {
				stored++
			}
			if !contains(blocked, i) && before[i] != before[perm[2]] {
				differ = true
			}
		}
		if stored < 3 {
			t.Fatalf("round %d: only %d primaries store a counter ≥ the fence %d: %v", round, stored, f, after)
		}
		for _, i := range blocked {
			if after[i] != before[i] {
				t.Fatalf("round %d: refusing primary %d's counter moved from %d to %d", round, i, before[i], after[i])
			}
		}
		if differ {
			writeBacks++
		}
		last = f
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for _, i := range blocked {
			if _, err := m.Nodes[i].Do(ctx, "DEL", n); err != nil {
				t.Fatal(err)
			}
		}
	}
	if writeBacks < 10 {
		t.Fatalf("only %d rounds needed a write-back: the test did not exercise it", writeBacks)
	}
	t.Logf("60 rounds, %d with diverging counters; last fence %d", writeBacks, last)
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestFenceConcurrentGrantsDistinct: many clients race for one lock on 3
// primaries; every pair of granted leases must have distinct fences, and
// fences must rise in the order the leases held the lock (checked by a
// guarded counter that refuses a fence lower than one it has seen).
func TestFenceConcurrentGrantsDistinct(t *testing.T) {
	m := nodes(t, 3, nil)
	ctx := t.Context()
	n := name(t)
	res := &guard.Counter{}
	var mu sync.Mutex
	seen := map[fencelock.Fence]bool{}
	var wg sync.WaitGroup
	errc := make(chan error, 6)
	for w := range 6 {
		c := open(t, m.URL(), nil)
		wg.Go(func() {
			for range 40 {
				l, err := c.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: 5 * time.Second, Wait: 20 * time.Second})
				if err != nil {
					errc <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				f := l.Fence()
				mu.Lock()
				dup := seen[f]
				seen[f] = true
				mu.Unlock()
				if dup {
					errc <- fmt.Errorf("fence %d granted twice", f)
					return
				}
				v, err := res.Claim(ctx, f)
				if err == nil {
					err = res.WriteClaimed(ctx, f, v+1)
				}
				if err != nil {
					errc <- fmt.Errorf("worker %d, fence %d refused by the guard: a later holder had a lower fence: %w", w, f, err)
					return
				}
				if err := l.Release(ctx); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if v, _ := res.Read(ctx); v != 240 {
		t.Fatalf("guarded counter %d, want 240", v)
	}
}

// TestFaultRollingEmptyRestart is the case Redlock's own docs warn about:
// the primaries holding a lease are restarted EMPTY one by one, faster
// than the TTL. A second client is then granted the lock while the first
// still holds it — mutual exclusion breaks, and the test detects it — but
// the second lease's fence is higher, so a claim-first guarded resource
// rejects the stale holder's write and nothing is lost; without fencing
// the same interleaving loses an increment. The stale holder's Release
// then reports the loss and leaves the new holder's lock intact.
func TestFaultRollingEmptyRestart(t *testing.T) {
	m := nodes(t, 5, nil)
	rec := faultrec.Begin(t, faultrec.Result{Backend: "redlock", Scenario: faultrec.ServerRestarted, Case: "3 of 5 back empty, rolling, within the TTL", Outcome: faultrec.Kept, Fence: faultrec.FenceIncreased})
	var notes []string
	ctx := t.Context()
	a, b := open(t, m.URL(), nil), open(t, m.URL(), nil)
	n := name(t)
	for _, mode := range []conformance.Mode{conformance.NoFencing, conformance.ClaimFirst} {
		res := &guard.Counter{}
		la, err := a.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false), Wait: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		redlock.Idle(a)
		fa := la.Fence()
		va, err := read(ctx, res, mode, fa) // a reads, then stalls
		if err != nil {
			t.Fatal(err)
		}
		// Rolling restart of three primaries, each back empty.
		start := time.Now()
		for _, i := range []int{0, 1, 2} {
			if err := m.RestartEmpty(ctx, i); err != nil {
				t.Fatal(err)
			}
		}
		lb, err := b.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)})
		if err != nil {
			t.Fatalf("%v: after 3 of 5 primaries restarted empty: %v", mode, err)
		}
		if la.Err() != nil || time.Now().After(la.ValidUntil()) {
			t.Fatalf("%v: the first lease ended (%v) before the overlap could be shown", mode, la.Err())
		}
		t.Logf("%v: restarts took %v; OVERLAP detected: lease A (fence %d) and lease B (fence %d) both held", mode, time.Since(start).Round(time.Millisecond), fa, lb.Fence())
		rec.SecondHolder = faultrec.OverlapFound // both leases valid at once, by their holders' own clocks
		fb := lb.Fence()
		if faultrec.FenceOf(fa, fb) != faultrec.FenceIncreased {
			rec.Fence = faultrec.FenceRepeated
		}
		if fb <= fa {
			t.Fatalf("%v: second holder's fence %d not above the stale holder's %d after empty restarts", mode, fb, fa)
		}
		// b does its increment; then the stale a writes.
		vb, err := read(ctx, res, mode, fb)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(ctx, res, mode, fb, vb+1); err != nil {
			t.Fatalf("%v: b's write: %v", mode, err)
		}
		errA := write(ctx, res, mode, fa, va+1)
		final, _ := res.Read(ctx)
		switch mode {
		case conformance.NoFencing:
			if errA != nil || final != 1 {
				t.Fatalf("no fencing: stale write %v, counter %d; want accepted and 1 (an increment lost)", errA, final)
			}
		case conformance.ClaimFirst:
			if errA == nil || final != 1 {
				t.Fatalf("claim-first: stale write %v, counter %d; want rejected and 1 (nothing lost: a retries)", errA, final)
			}
		}
		t.Logf("%v: stale write: %v; counter %d", mode, errA, final)
		if errA == nil {
			notes = append(notes, fmt.Sprintf("%v: the stale holder's write was accepted, counter %d after 2 increments", mode, final))
		} else {
			notes = append(notes, fmt.Sprintf("%v: the stale holder's write was rejected, counter %d (it retries: nothing lost)", mode, final))
		}
		rec.Note = "3 of 5 primaries restarted EMPTY within the TTL while a lease was held: a second client was granted while the first lease was still valid (two holders); the second fence was higher. " + strings.Join(notes, "; ")
		if err := la.Release(ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
			t.Fatalf("%v: stale holder's Release: %v, want ErrLeaseLost", mode, err)
		}
		if _, err := a.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("%v: after the stale Release the new holder's lock is gone: %v", mode, err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		redlock.Idle(a)
		redlock.Idle(b)
	}
}

func read(ctx context.Context, res *guard.Counter, mode conformance.Mode, f fencelock.Fence) (int64, error) {
	if mode == conformance.ClaimFirst {
		return res.Claim(ctx, f)
	}
	return res.Read(ctx)
}

func write(ctx context.Context, res *guard.Counter, mode conformance.Mode, f fencelock.Fence, v int64) error {
	if mode == conformance.ClaimFirst {
		return res.WriteClaimed(ctx, f, v)
	}
	return res.Write(ctx, v)
}

// TestFaultRollingRestartLostUpdates runs a lost-update experiment while
// the primaries are restarted empty one after another, round and round
// (each restart well within the TTL of the leases it wipes): workers
// increment a claim-first guarded counter, and some stall past their TTL
// between reading and writing. Every write the guard accepted must be in
// the final count: nothing is lost. (conformance.LostUpdates would stop at
// the first Release that cannot confirm; here a restart can legitimately
// leave a Release unconfirmed — the key is gone from the restarted primary
// — so the workers go on.)
func TestFaultRollingRestartLostUpdates(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	clients := []*fencelock.Client{open(t, m.URL(), nil), open(t, m.URL(), nil)}
	n := name(t)
	const ttl = 300 * time.Millisecond
	stop := make(chan struct{})
	restarts := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i = (i + 1) % 5 {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			if err := m.RestartEmpty(ctx, i); err != nil {
				t.Error(err)
				return
			}
			restarts++
		}
	})
	res := &guard.Counter{}
	var accepted, rejected, stalled, unavailable atomic.Int64
	var next atomic.Int64
	var workers sync.WaitGroup
	for w := range 4 {
		c := clients[w%2]
		workers.Go(func() {
			for {
				i := next.Add(1)
				if i > 200 {
					return
				}
				l, err := c.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: ttl, AutoRenew: fencelock.Bool(false), Wait: 10 * time.Second})
				if errors.Is(err, fencelock.ErrUnavailable) {
					unavailable.Add(1) // a majority briefly unreachable: try again
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				f := l.Fence()
				v, err := res.Claim(ctx, f)
				if err == nil {
					if i%10 == 0 { // this section stalls past its TTL
						stalled.Add(1)
						time.Sleep(ttl + ttl/2)
					}
					err = res.WriteClaimed(ctx, f, v+1)
				}
				if err == nil {
					accepted.Add(1)
				} else {
					rejected.Add(1)
				}
				_ = l.Release(ctx) // may be unconfirmed or lost across a restart
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	final, _ := res.Read(ctx)
	t.Logf("claim-first through %d empty restarts: %d accepted, %d rejected, %d stalled, %d acquires unavailable, final %d",
		restarts, accepted.Load(), rejected.Load(), stalled.Load(), unavailable.Load(), final)
	faultrec.Record(t, faultrec.Result{Backend: "redlock", Scenario: faultrec.ServerRestarted, Case: "rolling empty restarts under load", Outcome: faultrec.Granted,
		Note: fmt.Sprintf("4 workers, claim-first guarded counter, primaries restarted empty one after another every 250ms (TTL 300ms): %d restarts, %d writes accepted, %d stale writes rejected, %d updates lost",
			restarts, accepted.Load(), rejected.Load(), accepted.Load()-final)})
	if final != accepted.Load() {
		t.Fatalf("claim-first lost %d updates through rolling empty restarts", accepted.Load()-final)
	}
	if restarts < 3 || stalled.Load() == 0 {
		t.Fatalf("only %d restarts and %d stalls during the run", restarts, stalled.Load())
	}
}

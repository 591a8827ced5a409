package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
	"github.com/fencelock/fencelock/internal/faultrec"
	"github.com/fencelock/fencelock/internal/testserver"
)

// faultCluster starts a 3-member cluster of its own (members get killed).
func faultCluster(t *testing.T) *testserver.EtcdCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("fault test: skipped in -short mode")
	}
	c := testserver.StartEtcdCluster(t, 3)
	if c.External {
		testserver.SkipExternal(t, "ETCD_URL names an external server: fault tests need members of their own")
	}
	return c
}

func openURL(t *testing.T, url string) *fencelock.Client {
	t.Helper()
	c, err := fencelock.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitQueued waits until n keys are queued under the lock prefix pfx.
func waitQueued(t *testing.T, raw *clientv3.Client, pfx string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		resp, err := raw.Get(ctx, pfx+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count >= int64(n) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d keys not queued under %s: %v", n, pfx, err)
		}
		time.Sleep(5 * time.Millisecond) // polling the store for a state, not a sync
	}
}

type grant struct {
	l   *fencelock.Lease
	err error
}

// TestLeaderKillWhileHeldAndQueued: a holder and two queued waiters; the
// raft leader is killed (SIGKILL). The holder's lease survives the
// election, its guarded write lands, and the waiters get the lock in
// queue order with strictly greater fences, each claim-first write
// accepted: never two holders.
func TestLeaderKillWhileHeldAndQueued(t *testing.T) {
	cl := faultCluster(t)
	rec := faultrec.Begin(t, faultrec.Result{Backend: "etcd", Scenario: faultrec.PrimaryLost, Case: "leader killed, 3 members"})
	ctx := t.Context()
	url := cl.URL("fault")
	raw := newClientv3(t, cl.Endpoints()...)
	name := "kill-held"
	pfx := LockPrefix("fault/", name)
	h, w1, w2 := openURL(t, url), openURL(t, url), openURL(t, url)
	o := &fencelock.AcquireOptions{TTL: 3 * time.Second, Wait: 30 * time.Second}

	var res guard.Counter
	lh, err := h.Acquire(ctx, name, o)
	if err != nil {
		t.Fatal(err)
	}
	v, err := res.Claim(ctx, lh.Fence())
	if err != nil {
		t.Fatal(err)
	}
	g1, g2 := make(chan grant, 1), make(chan grant, 1)
	go func() { l, err := w1.Acquire(ctx, name, o); g1 <- grant{l, err} }()
	waitQueued(t, raw, pfx, 2)
	go func() { l, err := w2.Acquire(ctx, name, o); g2 <- grant{l, err} }()
	waitQueued(t, raw, pfx, 3)

	leader, err := cl.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leader.Start(context.Background()) })
	if _, err := cl.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	elected := time.Since(killed)
	// The holder's lease survived the election: it renews and its
	// claim-first write is still the newest.
	if err := lh.Extend(ctx, 0); err != nil {
		t.Fatalf("holder's Extend after the election: %v", err)
	}
	if err := res.WriteClaimed(ctx, lh.Fence(), v+1); err != nil {
		t.Fatalf("holder's write after the election: %v", err)
	}
	select {
	case g := <-g1:
		t.Fatalf("first waiter granted while the holder held the lock: %v", g.err)
	case g := <-g2:
		t.Fatalf("second waiter granted while the holder held the lock: %v", g.err)
	default:
	}
	rec.Outcome = faultrec.Kept
	released := time.Now()
	if err := lh.Release(ctx); err != nil {
		t.Fatalf("holder's Release after the election: %v", err)
	}
	fences := []fencelock.Fence{lh.Fence()}
	for i, gc := range []chan grant{g1, g2} {
		g := <-gc
		if g.err != nil {
			t.Fatalf("waiter %d: %v", i+1, g.err)
		}
		if i == 0 {
			rec.WaitGranted, rec.WaitFrom = time.Since(released), "release" // read when the grant is received
			select {
			case g := <-g2:
				t.Fatalf("second waiter granted while the first held the lock (not FIFO or two holders): %v", g.err)
			default:
			}
		}
		v, err := res.Claim(ctx, g.l.Fence())
		if err != nil {
			t.Fatalf("waiter %d's claim with fence %d: %v", i+1, g.l.Fence(), err)
		}
		if err := res.WriteClaimed(ctx, g.l.Fence(), v+1); err != nil {
			t.Fatalf("waiter %d's write: %v", i+1, err)
		}
		fences = append(fences, g.l.Fence())
		if err := g.l.Release(ctx); err != nil {
			t.Fatalf("waiter %d's Release: %v", i+1, err)
		}
	}
	if got, _ := res.Read(ctx); got != 3 {
		t.Fatalf("counter %d after three guarded increments, want 3", got)
	}
	rec.Fence = faultrec.FenceOf(fences[0], fences[1])
	if fences[2] <= fences[1] {
		rec.Fence = faultrec.FenceRepeated
	}
	rec.SecondHolder = faultrec.OverlapNone // no early grant; every claim-first write accepted
	rec.Note = fmt.Sprintf("raft leader killed (SIGKILL) with a holder and 2 queued waiters: new leader after %v; the holder kept its lease and its guarded write; the waiters were granted in queue order after its release", elected.Round(time.Millisecond))
	t.Logf("leader %s killed; new leader after %v; fences across the election %v", leader.Name, elected.Round(time.Millisecond), fences)
}

// TestLeaderKillUnderContention: four clients contend for one lock with
// claim-first writes to a guarded counter; the leader is killed mid-run and
// restarted later. No claim or write is ever refused (a refusal would mean
// two holders or a fence out of order), at most one worker is inside at a
// time, and no increment is lost.
func TestLeaderKillUnderContention(t *testing.T) {
	cl := faultCluster(t)
	ctx := t.Context()
	url := cl.URL("fault")
	name := "kill-contended"
	const workers, perPhase = 4, 30

	var res guard.Counter
	var inside, maxInside, done, retries, unconfirmed atomic.Int64
	var mu sync.Mutex
	var errs []error
	var lastFence fencelock.Fence
	var fenceBeforeKill fencelock.Fence
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	killAt, restartAt := make(chan struct{}), make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		c := openURL(t, url)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := c.Acquire(ctx, name, &fencelock.AcquireOptions{TTL: 3 * time.Second, Wait: 30 * time.Second})
				if errors.Is(err, fencelock.ErrUnavailable) {
					retries.Add(1) // the cluster is electing: try again
					continue
				}
				if err != nil {
					fail(err)
					return
				}
				n := inside.Add(1)
				for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
				}
				f := l.Fence()
				v, err := res.Claim(ctx, f)
				if err == nil {
					err = res.WriteClaimed(ctx, f, v+1)
				}
				mu.Lock()
				if f <= lastFence {
					errs = append(errs, errors.New("fence went backwards"))
				}
				lastFence = f
				mu.Unlock()
				inside.Add(-1)
				if err != nil {
					fail(err)
				}
				// Around the kill, Release may find the lease ended (its
				// renewals could not reach a leader in time) or be unable to
				// confirm (the cluster electing; the lock then expires with
				// its TTL): honest outcomes. Safety is what this test checks.
				if rerr := l.Release(ctx); errors.Is(rerr, fencelock.ErrLeaseLost) || errors.Is(rerr, fencelock.ErrUnavailable) || errors.Is(rerr, context.DeadlineExceeded) {
					unconfirmed.Add(1)
				} else if rerr != nil {
					fail(rerr)
				}
				switch done.Add(1) {
				case perPhase:
					close(killAt)
				case 2 * perPhase:
					close(restartAt)
				case 3 * perPhase:
					close(stop)
				}
			}
		})
	}
	<-killAt
	leader, err := cl.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	fenceBeforeKill = lastFence
	mu.Unlock()
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	<-restartAt
	sinceKill := time.Since(killed)
	if err := leader.Start(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if m := maxInside.Load(); m != 1 {
		t.Errorf("%d workers inside at once", m)
	}
	final, _ := res.Read(ctx)
	if final != done.Load() {
		t.Errorf("counter %d after %d sections: updates lost", final, done.Load())
	}
	t.Logf("%d sections; leader %s killed after %d (fence %d), %d more in the next %v, restarted, last fence %d; %d acquires retried on ErrUnavailable, %d releases found the lease ended or could not confirm",
		done.Load(), leader.Name, perPhase, fenceBeforeKill, perPhase, sinceKill.Round(time.Millisecond), lastFence, retries.Load(), unconfirmed.Load())
}

// TestPartitionedClientLosesLease: a holder whose client is cut off from
// etcd (a paused proxy: no byte moves, no connection closes) can no longer
// renew. Its lease ends (Done) at its validity deadline, before etcd expires
// the lease and the queued waiter gets the lock with a higher fence; the
// stale holder's guarded write is refused and its Release reports the loss
// without touching the new holder's lock.
func TestPartitionedClientLosesLease(t *testing.T) {
	srv := sharedEtcd(t, 1)
	if srv.External {
		testserver.SkipExternal(t, "ETCD_URL names an external server")
	}
	rec := faultrec.Begin(t, faultrec.Result{Backend: "etcd", Scenario: faultrec.ClientPartitioned})
	ctx := t.Context()
	proxy, err := testserver.NewEtcdProxy(srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	kp := "partition-" + time.Now().Format("150405.000000")
	pc := openURL(t, "etcd://"+proxy.Addr()+"/"+kp) // the partitioned client
	wc := openURL(t, srv.URL(kp))                   // the waiter, directly
	raw := newClientv3(t, srv.Endpoints()...)
	name := "job"
	const ttl = 2 * time.Second

	var res guard.Counter
	lp, err := pc.Acquire(ctx, name, &fencelock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	v, err := res.Claim(ctx, lp.Fence())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan grant, 1)
	var grantedAt time.Time
	go func() {
		l, err := wc.Acquire(ctx, name, &fencelock.AcquireOptions{TTL: 30 * time.Second, Wait: 30 * time.Second})
		grantedAt = time.Now()
		got <- grant{l, err}
	}()
	waitQueued(t, raw, LockPrefix(kp+"/", name), 2)

	proxy.Pause()
	paused := time.Now()
	select {
	case <-lp.Done():
	case <-time.After(ttl + 5*time.Second):
		t.Fatalf("partitioned holder's lease not ended %v after the partition (TTL %v)", time.Since(paused), ttl)
	}
	lostAfter := time.Since(paused)
	if !errors.Is(lp.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("partitioned holder's Err = %v, want ErrLeaseLost", lp.Err())
	}
	rec.Outcome = faultrec.Lost
	if lostAfter > ttl+time.Second {
		t.Errorf("partitioned holder learnt of the loss %v after the partition, TTL %v", lostAfter, ttl)
	}
	g := <-got
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	defer g.l.Release(ctx)
	rec.WaitGranted, rec.WaitFrom = grantedAt.Sub(paused), "partition"
	rec.Fence = faultrec.FenceOf(lp.Fence(), g.l.Fence())
	rec.SecondHolder = faultrec.OverlapOf(!grantedAt.After(lp.ValidUntil()))
	if vu := lp.ValidUntil(); !grantedAt.After(vu) {
		t.Fatalf("waiter granted %v before the partitioned holder's lease ran out: two holders", vu.Sub(grantedAt))
	}
	if g.l.Fence() <= lp.Fence() {
		t.Fatalf("waiter's fence %d not above the partitioned holder's %d", g.l.Fence(), lp.Fence())
	}
	wv, err := res.Claim(ctx, g.l.Fence())
	if err != nil {
		t.Fatal(err)
	}
	if err := res.WriteClaimed(ctx, g.l.Fence(), wv+1); err != nil {
		t.Fatal(err)
	}
	// The partitioned holder wakes up and writes anyway: refused.
	if err := res.WriteClaimed(ctx, lp.Fence(), v+100); !errors.Is(err, guard.ErrStale) {
		rec.SecondHolder = faultrec.OverlapFound
		t.Fatalf("stale holder's write: %v, want guard.ErrStale", err)
	}
	rec.Note = fmt.Sprintf("holder behind a paused proxy, TTL %v: its lease ended locally %v after the cut, before etcd expired it; its fenced write was rejected", ttl, lostAfter.Round(time.Millisecond))
	proxy.Resume()
	if err := lp.Release(ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("stale holder's Release: %v, want ErrLeaseLost", err)
	}
	if _, err := openURL(t, srv.URL(kp)).TryAcquire(ctx, name, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire after the stale Release: %v (the stale holder freed the new holder's lock?)", err)
	}
	if g.l.Err() != nil {
		t.Fatalf("new holder's lease ended: %v", g.l.Err())
	}
	t.Logf("partitioned at fence %d; its lease ended %v later; waiter granted fence %d %v after the partition",
		lp.Fence(), lostAfter.Round(time.Millisecond), g.l.Fence(), grantedAt.Sub(paused).Round(time.Millisecond))
}

package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/faultrec"
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// margin is the slack allowed for timing assertions on a loaded machine.
const margin = 500 * time.Millisecond

type grant struct {
	l   *fencelock.Lease
	err error
	at  time.Time
}

func acquireAsync(ctx context.Context, c *fencelock.Client, n string, ttl time.Duration) <-chan grant {
	ch := make(chan grant, 1)
	go func() {
		l, err := c.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: ttl})
		ch <- grant{l, err, time.Now()}
	}()
	return ch
}

// waitChildren waits until the lock path has want contenders (the queue a
// test set up is in place).
func waitChildren(t *testing.T, raw *zk.Conn, p string, want int) {
	t.Helper()
	testhelp.Eventually(t, 20*time.Second, func() error {
		kids, _, err := raw.Children(p)
		if err == nil && len(kids) == want {
			return nil
		}
		return fmt.Errorf("lock path %s: children %v (%v), want %d", p, kids, err, want)
	})
}

func notYet(t *testing.T, ch <-chan grant, what string) {
	t.Helper()
	select {
	case g := <-ch:
		t.Fatalf("%s returned early: %v", what, g.err)
	default:
	}
}

func await(t *testing.T, ch <-chan grant, d time.Duration, what string) grant {
	t.Helper()
	select {
	case g := <-ch:
		if g.err != nil {
			t.Fatalf("%s: %v", what, g.err)
		}
		return g
	case <-time.After(d):
		t.Fatalf("%s: not granted within %v", what, d)
	}
	return grant{}
}

// TestFaultEnsembleLeaderKilled: the ensemble's leader is killed while a
// lease is held and two waiters queue. The lease survives (its session
// moves to another server), the waiters are granted in order once the
// holder releases, and fences increase.
func TestFaultEnsembleLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts 3 ZooKeeper servers")
	}
	z := testserver.StartZooKeeperEnsemble(t, 3)
	rec := faultrec.Begin(t, faultrec.Result{Backend: "zookeeper", Scenario: faultrec.PrimaryLost, Case: "leader killed, 3 servers"})
	ctx := t.Context()
	const ttl = 10 * time.Second // sessions outlive an election
	holder, w1, w2 := open(t, z.URL(), nil), open(t, z.URL(), nil), open(t, z.URL(), nil)
	raw := rawConn(t, z.URL())
	n := name(t)
	l0, err := holder.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	g1 := acquireAsync(ctx, w1, n, ttl)
	waitChildren(t, raw, lockPath(n), 2)
	g2 := acquireAsync(ctx, w2, n, ttl)
	waitChildren(t, raw, lockPath(n), 3)

	leader, err := z.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for {
		nl, err := z.Leader(ctx)
		if err == nil && nl != leader {
			break
		}
		if time.Since(killed) > ttl/2 {
			t.Fatalf("no new leader %v after killing node %d", time.Since(killed), leader.ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	elected := time.Since(killed)
	t.Logf("node %d (leader) killed; new leader after %v", leader.ID, elected.Round(time.Millisecond))
	// The holder's session is alive: a renewal succeeds once its client is
	// connected to a serving node again (it may have been on the dead one).
	for {
		err := l0.Extend(ctx, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, fencelock.ErrUnavailable) || time.Since(killed) > ttl/2 {
			t.Fatalf("holder's renewal after the election: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if l0.Err() != nil {
		t.Fatalf("holder's lease ended across the election: %v", l0.Err())
	}
	rec.Outcome = faultrec.Kept
	notYet(t, g1, "first waiter while the holder holds")
	notYet(t, g2, "second waiter while the holder holds")

	released := time.Now()
	if err := l0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r1 := await(t, g1, 10*time.Second, "first waiter after Release")
	rec.WaitGranted, rec.WaitFrom = r1.at.Sub(released), "release"
	rec.Fence = faultrec.FenceOf(l0.Fence(), r1.l.Fence())
	notYet(t, g2, "second waiter while the first holds")
	if r1.l.Fence() <= l0.Fence() {
		t.Fatalf("first waiter's fence %d not above the holder's %d", r1.l.Fence(), l0.Fence())
	}
	if err := r1.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := await(t, g2, 10*time.Second, "second waiter after the first released")
	defer r2.l.Release(ctx)
	if r2.l.Fence() <= r1.l.Fence() {
		rec.Fence = faultrec.FenceRepeated
		t.Fatalf("second waiter's fence %d not above the first's %d", r2.l.Fence(), r1.l.Fence())
	}
	rec.SecondHolder = faultrec.OverlapNone // no waiter granted before the one ahead released
	rec.Note = fmt.Sprintf("ensemble leader killed (SIGKILL) with a holder and 2 queued waiters: new leader after %v; the holder's session moved and its lease survived; the waiters were granted in order after its release", elected.Round(time.Millisecond))
}

// TestFaultClientPartitioned: a holder cut off from ZooKeeper (a paused
// proxy: no byte moves) keeps failing to renew; its lease ends at its
// local deadline, before the server expires its session and grants the
// waiter, whose fence is higher. After the partition heals, the stale
// holder's Release is ErrLeaseLost and frees nothing.
func TestFaultClientPartitioned(t *testing.T) {
	u := sharedURL(t)
	srv := servers(t, u)
	if len(srv) != 1 {
		testserver.SkipExternal(t, "needs a single server behind the proxy")
	}
	proxy, err := testserver.NewEtcdProxy(srv[0])
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	rec := faultrec.Begin(t, faultrec.Result{Backend: "zookeeper", Scenario: faultrec.ClientPartitioned})
	ctx := t.Context()
	const ttl = 2 * time.Second
	cut := open(t, "zk://"+proxy.Addr()+root, nil)
	other := open(t, u, nil)
	raw := rawConn(t, u)
	n := name(t)
	l, err := cut.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	g := acquireAsync(ctx, other, n, 30*time.Second)
	waitChildren(t, raw, lockPath(n), 2)

	proxy.Pause()
	paused := time.Now()
	select {
	case <-l.Done():
	case <-time.After(ttl + margin):
		t.Fatalf("partitioned lease still held %v after the partition", time.Since(paused))
	}
	lostAt := time.Now()
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("partitioned lease Err = %v, want ErrLeaseLost", l.Err())
	}
	rec.Outcome = faultrec.Lost
	r := await(t, g, 3*ttl, "waiter while the holder is partitioned")
	defer r.l.Release(ctx)
	rec.WaitGranted, rec.WaitFrom = r.at.Sub(paused), "partition"
	rec.Fence = faultrec.FenceOf(l.Fence(), r.l.Fence())
	rec.SecondHolder = faultrec.OverlapOf(!r.at.After(lostAt))
	rec.Note = fmt.Sprintf("holder behind a paused proxy, session timeout %v: its lease ended locally %v after the cut, before the server expired the session", ttl, lostAt.Sub(paused).Round(time.Millisecond))
	if !r.at.After(lostAt) {
		t.Fatalf("waiter granted %v before the partitioned lease ended: two holders", lostAt.Sub(r.at))
	}
	if r.l.Fence() <= l.Fence() {
		t.Fatalf("waiter's fence %d not above the partitioned holder's %d", r.l.Fence(), l.Fence())
	}
	t.Logf("partitioned at 0; lease ended locally at %v; server expired the session and granted the waiter at %v",
		lostAt.Sub(paused).Round(time.Millisecond), r.at.Sub(paused).Round(time.Millisecond))

	proxy.Resume()
	if err := l.Release(ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("stale Release after the partition healed: %v, want ErrLeaseLost", err)
	}
	if _, err := other.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire after the stale Release: %v (the stale holder freed the lock?)", err)
	}
	if r.l.Err() != nil {
		t.Fatalf("waiter's lease ended: %v", r.l.Err())
	}
}

// TestFaultOverlongLeaseEndsAtDisconnect: a lease extended past its
// session's timeout could outlive, by its local deadline, a session the
// server expires; so it ends as soon as its connection drops, which is
// before the server can expire the session.
func TestFaultOverlongLeaseEndsAtDisconnect(t *testing.T) {
	u := sharedURL(t)
	srv := servers(t, u)
	if len(srv) != 1 {
		testserver.SkipExternal(t, "needs a single server behind the proxy")
	}
	proxy, err := testserver.NewEtcdProxy(srv[0])
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ctx := t.Context()
	const ttl = 2 * time.Second
	cut := open(t, "zk://"+proxy.Addr()+root, nil)
	other := open(t, u, nil)
	n := name(t)
	l, err := cut.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: ttl, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := l.StoreTTL(); st < 30*time.Second {
		t.Errorf("StoreTTL %v after Extend(30s)", st)
	}
	g := acquireAsync(ctx, other, n, 30*time.Second)
	proxy.Pause()
	defer proxy.Resume()
	paused := time.Now()
	select {
	case <-l.Done():
	case <-time.After(ttl):
		t.Fatalf("overlong lease still held %v after its connection was cut (session timeout %v)", time.Since(paused), ttl)
	}
	lostAt := time.Now()
	r := await(t, g, 3*ttl, "waiter")
	defer r.l.Release(ctx)
	if !r.at.After(lostAt) {
		t.Fatalf("waiter granted before the overlong lease ended")
	}
	t.Logf("cut at 0; overlong lease ended at %v; waiter granted at %v", lostAt.Sub(paused).Round(time.Millisecond), r.at.Sub(paused).Round(time.Millisecond))
}

// TestFaultStandaloneRestart: a standalone server killed (SIGKILL) and
// restarted within the session timeout keeps the session and its node
// (fsync on): the lease survives; fences keep increasing.
func TestFaultStandaloneRestart(t *testing.T) {
	z := testserver.StartZooKeeperProcess(t)
	rec := faultrec.Begin(t, faultrec.Result{Backend: "zookeeper", Scenario: faultrec.ServerRestarted, Case: "standalone, from its data"})
	ctx := t.Context()
	c := open(t, z.URL(), nil)
	n := name(t)
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := z.Nodes[0].Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := z.Nodes[0].Proc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := l.Extend(ctx, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, fencelock.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("renewal after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	renewed := time.Since(killed)
	rec.Outcome = faultrec.Kept
	if _, err := open(t, z.URL(), nil).TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		rec.SecondHolder = faultrec.OverlapFound
		t.Fatalf("TryAcquire after the restart: %v, want ErrNotAcquired (the lease survived)", err)
	}
	rec.SecondHolder = faultrec.OverlapNone
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := c.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	rec.Fence = faultrec.FenceOf(l.Fence(), l2.Fence())
	rec.Note = fmt.Sprintf("standalone server killed (SIGKILL) and restarted from its data (fsync on) within the session timeout: the session and its lock node survived; the holder renewed %v after the kill; another client was refused", renewed.Round(time.Millisecond))
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after the restart, not above %d", l2.Fence(), l.Fence())
	}
}

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redis"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/faultrec"
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestCluster runs the suite and the slot checks on a real 3-primary
// Redis Cluster.
func TestCluster(t *testing.T) {
	cl := testserver.StartRedisCluster(t, nil)
	t.Run("Conformance", func(t *testing.T) { conformance.RunConformanceTests(t, newHarness(t, cl.URL())) })
	t.Run("AwkwardSlots", func(t *testing.T) { testAwkwardSlots(t, cl) })
	t.Run("Admin", func(t *testing.T) { testClusterAdmin(t, cl.URL()) })
	t.Run("SingleServerClientOnClusterNode", func(t *testing.T) {
		if len(cl.Nodes) == 0 {
			testserver.SkipExternal(t, "existing cluster: node addresses unknown")
		}
		c := open(t, "redis://"+cl.Nodes[0].Addr()+"/0", nil, nil)
		// Some name hashes to a slot another node serves: MOVED.
		for i := range 100 {
			_, err := c.TryAcquire(t.Context(), fmt.Sprintf("%s-%d", name(t), i), nil)
			if err == nil {
				continue
			}
			if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), "cluster=true") {
				t.Fatalf("single-server client on a cluster node: %v, want ErrInvalid saying to use cluster=true", err)
			}
			return
		}
		t.Fatal("100 names all served by one node of three")
	})
	t.Run("As", func(t *testing.T) {
		c := open(t, cl.URL(), nil, nil)
		var cc *goredis.ClusterClient
		var sc *goredis.Client
		if !c.As(&cc) || cc == nil || c.As(&sc) {
			t.Fatalf("As on a cluster client: *ClusterClient %v, *Client %v", cc != nil, sc != nil)
		}
	})
}

// testAwkwardSlots: names whose braces defeat the usual "{name}" tagging
// still keep the lock key and its fence key in one slot (as the server
// computes it), and lock fine through the cluster (a script touching two
// slots would fail with CROSSSLOT).
func testAwkwardSlots(t *testing.T, cl *testserver.RedisCluster) {
	c := open(t, cl.URL(), nil, nil)
	rc := native(t, c)
	ctx := t.Context()
	base := name(t)
	for _, n := range []string{base, "{" + base + "}:x", base + "}", "}" + base, base + "{}", "{}" + base, base + "{", "x{}y}" + base, "ü{日}" + base} {
		slot, err := rc.ClusterKeySlot(ctx, n).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redis.KeySlot(n); got != int(slot) {
			t.Errorf("%q: backend computes slot %d, the server %d", n, got, slot)
		}
		fk := redis.FenceKey(n)
		if fslot := rc.ClusterKeySlot(ctx, fk).Val(); fslot != slot {
			t.Errorf("%q: fence key %q in slot %d, lock key in %d", n, fk, fslot, slot)
		}
		l, err := c.TryAcquire(ctx, n, nil)
		if err != nil {
			t.Fatalf("%q: %v", n, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%q: %v", n, err)
		}
	}
}

// TestFaultClusterFailover: 3 primaries + 3 replicas. The primary serving
// the name's slot dies while its replica lags behind by the last grants;
// the replica is promoted with a stale fence counter, acquiring works
// again, and the fence is still above every earlier one (the time floor).
func TestFaultClusterFailover(t *testing.T) {
	cl := testserver.StartRedisCluster(t, &testserver.RedisClusterOptions{Replicas: 1})
	if len(cl.Nodes) == 0 {
		testserver.SkipExternal(t, "existing cluster (REDIS_CLUSTER_URL): no fault controls")
	}
	rec := faultrec.Begin(t, faultrec.Result{Backend: "redis", Scenario: faultrec.PrimaryLost, Case: "cluster failover"})
	ctx := t.Context()
	c := open(t, cl.URL(), nil, nil)
	rc := native(t, c)
	n := name(t)
	master, err := cl.MasterOf(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := cl.ReplicasOf(ctx, master)
	if err != nil || len(reps) != 1 {
		t.Fatalf("replicas of %s: %v %v", master.Addr(), reps, err)
	}
	replica := reps[0]
	grant := func() fencelock.Fence {
		t.Helper()
		l, err := c.Acquire(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		return l.Fence()
	}
	var last fencelock.Fence
	for range 3 {
		last = grant()
	}
	replicated := last
	waitReplicated(t, master, replica)
	// Freeze the replica, then push more than the kernel's socket buffers
	// can hold through the replication link, so that the next grants stay
	// in the primary's output buffer and die with it.
	if err := replica.Proc.Pause(); err != nil {
		t.Fatal(err)
	}
	filler := strings.Repeat("x", 1<<20)
	for i := range 48 {
		if err := rc.Set(ctx, fmt.Sprintf("{%s}:filler:%d", n, i), filler, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		last = grant()
	}
	if err := master.Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := replica.Proc.Resume(); err != nil {
		t.Fatal(err)
	}

	// Wait for the promotion (a condition, bounded).
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		role, err := replica.Do(wctx, "ROLE")
		if r, ok := role.([]any); err == nil && ok && len(r) > 0 && r[0] == "master" {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("replica %s not promoted %v after its primary died", replica.Addr(), time.Since(killed))
		}
		time.Sleep(50 * time.Millisecond)
	}
	promoted := time.Since(killed)
	stale, err := replica.Do(ctx, "GET", redis.FenceKey(n))
	if err != nil {
		t.Fatal(err)
	}
	var staleFence uint64
	if s, ok := stale.(string); ok {
		fmt.Sscan(s, &staleFence)
	}
	if staleFence != uint64(replicated) {
		t.Fatalf("promoted replica's fence counter is %d, want %d, the last grant it had before it was cut off (the last fence was %d)", staleFence, replicated, last)
	}

	// Acquire works again once the client sees the new topology.
	var l *fencelock.Lease
	for {
		actx, cancel := context.WithTimeout(wctx, 2*time.Second)
		l, err = c.TryAcquire(actx, n, nil)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, fencelock.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("acquire during failover: %v, want ErrUnavailable until the cluster recovers", err)
		}
		if wctx.Err() != nil {
			t.Fatalf("acquire still failing %v after the failover: %v", time.Since(killed), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer l.Release(ctx)
	rec.Outcome = faultrec.Granted
	rec.WaitGranted, rec.WaitFrom = time.Since(killed), "SIGKILL"
	rec.Fence = faultrec.FenceOf(last, l.Fence())
	rec.Note = fmt.Sprintf("Redis Cluster, the slot's primary killed while its replica lagged 3 grants behind: the replica was promoted %v after the kill with a stale fence counter; the time floor kept the next fence above every earlier one", promoted.Round(time.Millisecond))
	if l.Fence() <= last {
		t.Fatalf("fence %d after failover, not above the last %d (stale counter %d)", l.Fence(), last, staleFence)
	}
	t.Logf("replica promoted %v after the kill with the fence counter at %d, missing the last 3 grants (last fence %d); first fence after failover %d; acquire worked again %v after the kill",
		promoted.Round(time.Millisecond), staleFence, last, l.Fence(), time.Since(killed).Round(time.Millisecond))
}

// waitReplicated waits until replica has applied everything master wrote.
func waitReplicated(t *testing.T, master, replica *testserver.Redis) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	info, err := master.Do(ctx, "INFO", "replication")
	if err != nil {
		t.Fatal(err)
	}
	var want, got int64
	fmt.Sscan(testserver.InfoField(info, "master_repl_offset"), &want)
	for {
		info, err := replica.Do(ctx, "INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Sscan(testserver.InfoField(info, "slave_repl_offset"), &got)
		if got >= want {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("replica at offset %d, primary at %d", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testClusterAdmin: on a cluster, Expire deletes a lock key on whichever
// node serves it, and KillSessions drops the client's locks on every shard
// and kills its connections to every node.
func testClusterAdmin(t *testing.T, url string) {
	ctx := t.Context()
	a := open(t, url, nil, nil)
	obs := open(t, url, nil, nil)
	var cc *goredis.ClusterClient
	if !a.As(&cc) {
		t.Fatal("As(**goredis.ClusterClient) = false")
	}
	aName := cc.Options().ClientName
	o := &fencelock.AcquireOptions{TTL: 600 * time.Millisecond} // renewed every 200ms
	var ls []*fencelock.Lease
	for i := range 6 { // spread over the shards
		l, err := a.TryAcquire(ctx, fmt.Sprintf("%s-%d", name(t), i), o)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	if err := testhelp.Admin(t, obs).Expire(ctx, ls[0].Name()); err != nil {
		t.Fatal(err)
	}
	rc := native(t, obs)
	if rc.Exists(ctx, ls[0].Name()).Val() != 0 {
		t.Fatal("lock key still there after Expire")
	}
	if err := testhelp.Admin(t, a).KillSessions(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range ls[1:] {
		if rc.Exists(ctx, l.Name()).Val() != 0 {
			t.Fatalf("lock %q still held after KillSessions", l.Name())
		}
	}
	var left []string
	err := rc.(*goredis.ClusterClient).ForEachShard(ctx, func(ctx context.Context, n *goredis.Client) error {
		list, err := n.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(list, "\n") {
			if strings.Contains(line, " name="+aName+" ") && strings.Contains(line, "cmd=client") {
				left = append(left, line) // the admin connection itself, killed after its reply
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("KillSessions left its own admin connections:\n%s", strings.Join(left, "\n"))
	}
	for _, l := range ls {
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("lease %q not reported lost after KillSessions", l.Name())
		}
	}
}

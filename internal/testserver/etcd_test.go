package testserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func etcdTestClient(t *testing.T, eps ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func TestStartEmbeddedEtcd(t *testing.T) {
	ctx := t.Context()
	url, stop, err := StartEmbeddedEtcd(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "etcd://127.0.0.1:") || !strings.HasSuffix(url, "/") {
		t.Fatalf("url %q", url)
	}
	cli := etcdTestClient(t, strings.TrimSuffix(strings.TrimPrefix(url, "etcd://"), "/"))
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	g, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 1 {
		t.Errorf("a 1s lease was granted %ds: the election timeout is too long for 1s leases", g.TTL)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := cli.Get(cctx, "k"); err == nil {
		t.Fatal("Get served after stop")
	}
}

// TestEtcdClusterFaults: a 3-member cluster survives killing its leader,
// elects another, and takes the killed member back with its data.
func TestEtcdClusterFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("3-member cluster: skipped in -short mode")
	}
	c := StartEtcdCluster(t, 3)
	if c.External {
		t.Skip("ETCD_URL set")
	}
	ctx := t.Context()
	cli := etcdTestClient(t, c.Endpoints()...)
	if _, err := cli.Put(ctx, "k", "1"); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	if leader.Running() {
		t.Fatal("killed member still running")
	}
	next, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatal("the killed member is still the leader")
	}
	if _, err := cli.Put(ctx, "k", "2"); err != nil {
		t.Fatalf("write with a member down: %v", err)
	}
	if err := leader.Start(ctx); err != nil {
		t.Fatal(err)
	}
	one := etcdTestClient(t, leader.Endpoint())
	resp, err := one.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("restarted member serves %v, %v; want k=2", resp, err)
	}
	// A paused (SIGSTOP) member answers nothing until resumed.
	if err := leader.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = one.Get(pctx, "k", clientv3.WithSerializable())
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused member answered: %v", err)
	}
	if err := leader.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, err := one.Get(ctx, "k", clientv3.WithSerializable()); err != nil {
		t.Fatalf("resumed member: %v", err)
	}
}

func TestEtcdProxyPause(t *testing.T) {
	ctx := t.Context()
	url, stop, err := StartEmbeddedEtcd(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	p, err := NewEtcdProxy(strings.TrimSuffix(strings.TrimPrefix(url, "etcd://"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cli := etcdTestClient(t, p.Addr())
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	p.Pause()
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cli.Get(pctx, "k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get through a paused proxy: %v", err)
	}
	p.Resume()
	if _, err := cli.Get(ctx, "k"); err != nil {
		t.Fatalf("Get after Resume: %v", err)
	}
}

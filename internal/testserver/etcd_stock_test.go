package testserver_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/internal/testserver"
)

// TestStockEtcdDefaultTiming: the stock server has etcd's default timing,
// so it raises a 1 s lease to 2 s, and its fault controls work.
func TestStockEtcdDefaultTiming(t *testing.T) {
	e := testserver.StartStockEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	g, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 2 {
		t.Fatalf("stock etcd granted %d s for a 1 s lease, want 2 (default election timeout 1000 ms)", g.TTL)
	}
	st, err := cli.Status(ctx, e.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if v := st.Version; len(v) < 3 || v[:3] != "3.4" {
		t.Logf("stock etcd version %s (3.4 expected from Debian's etcd-server)", v)
	}
	if err := e.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if _, err := cli.Get(ctx, "x"); err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
}

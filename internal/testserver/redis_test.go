package testserver

import (
	"context"
	"testing"
	"time"
)

func TestRedisProcess(t *testing.T) {
	r := StartRedisProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.Do(ctx, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	// Persistence is off: a restart comes back empty.
	if err := r.Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Do(ctx, "PING"); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	if err := r.Proc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	v, err := r.Do(ctx, "GET", "k")
	if err != nil || v != nil {
		t.Fatalf("GET k after restart = %v, %v; want nil (empty server)", v, err)
	}
	if _, err := r.Do(ctx, "NOSUCHCOMMAND"); !IsRedisReply(err) {
		t.Fatalf("unknown command: err %v, want an error reply", err)
	}
}

func TestRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 6 servers")
	}
	c := StartRedisCluster(t, &RedisClusterOptions{Replicas: 1})
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes, want 6", len(c.Nodes))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := c.MasterOf(ctx, "some-key")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Do(ctx, "SET", "some-key", "v"); err != nil {
		t.Fatalf("SET on the slot's primary: %v", err)
	}
	rs, err := c.ReplicasOf(ctx, m)
	if err != nil || len(rs) != 1 {
		t.Fatalf("replicas of %s: %v, %v; want one", m.Addr(), rs, err)
	}
	for _, n := range c.Nodes {
		if n.BusPort == 0 || n.BusPort == n.Port+10000 {
			t.Errorf("%s: bus port %d, want an explicit free port", n.Addr(), n.BusPort)
		}
	}
}

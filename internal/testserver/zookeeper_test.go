package testserver

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestZooKeeperStandalone(t *testing.T) {
	z := StartZooKeeperProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if mode, err := ZKMode(ctx, z.Nodes[0].Addr()); err != nil || mode != "standalone" {
		t.Fatalf("mode %q, %v; want standalone", mode, err)
	}
	if !strings.HasPrefix(z.URL(), "zk://127.0.0.1:") {
		t.Fatalf("URL %q", z.URL())
	}
	if err := z.Nodes[0].Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := ZKMode(ctx, z.Nodes[0].Addr()); err == nil {
		t.Fatal("srvr answered after Kill")
	}
	if err := z.Nodes[0].Proc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ZKMode(ctx, z.Nodes[0].Addr()); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

func TestZooKeeperEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 JVMs")
	}
	z := StartZooKeeperEnsemble(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leaders := 0
	for _, n := range z.Nodes {
		mode, err := ZKMode(ctx, n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if mode == "leader" {
			leaders++
		} else if mode != "follower" {
			t.Fatalf("node %d mode %q", n.ID, mode)
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders, want 1", leaders)
	}
	old, err := z.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	// The two others elect a new leader.
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := z.Leader(ctx)
		if err == nil && l != old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new leader 30s after killing node %d: %v", old.ID, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package testserver

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestRedisNodes(t *testing.T) {
	m := StartRedisNodes(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(m.Nodes) != 3 || len(m.Addrs()) != 3 {
		t.Fatalf("%d nodes, want 3", len(m.Nodes))
	}
	if u := m.URL(); !strings.HasPrefix(u, "redlock://127.0.0.1:") || strings.Count(u, ",") != 2 {
		t.Fatalf("URL %q", u)
	}
	// Independent servers: a key set on one is not on the others.
	if _, err := m.Nodes[0].Do(ctx, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	for _, n := range m.Nodes[1:] {
		if v, err := n.Do(ctx, "GET", "k"); err != nil || v != nil {
			t.Fatalf("GET k on another node = %v, %v; want nil", v, err)
		}
	}
	// Pause: no answer until Resume.
	if err := m.Pause(1); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := m.Nodes[1].Do(pctx, "PING")
	pcancel()
	if err == nil {
		t.Fatal("PING answered by a paused node")
	}
	if err := m.Resume(1); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Nodes[1].Do(ctx, "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING after Resume = %v, %v", v, err)
	}
	// No persistence: Restart comes back empty.
	if err := m.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Nodes[0].Do(ctx, "GET", "k"); err != nil || v != nil {
		t.Fatalf("GET k after Restart without persistence = %v, %v; want nil", v, err)
	}
	// Kill, then Start.
	if err := m.Kill(2); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Nodes[2].Do(ctx, "PING"); err == nil {
		t.Fatal("PING answered by a killed node")
	}
	if err := m.Start(ctx, 2); err != nil {
		t.Fatal(err)
	}
}

func TestRedisNodesAppendOnly(t *testing.T) {
	m := StartRedisNodes(t, 1, &RedisNodesOptions{AppendOnly: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := m.Nodes[0]
	if v, err := n.Do(ctx, "CONFIG", "GET", "appendfsync"); err != nil || !strings.Contains(strings.Join(strs(v), " "), "always") {
		t.Fatalf("appendfsync = %v, %v; want always", v, err)
	}
	if _, err := n.Do(ctx, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	// A crash keeps every acknowledged write.
	if err := m.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := n.Do(ctx, "GET", "k"); err != nil || v != "v" {
		t.Fatalf("GET k after a crash with appendfsync always = %v, %v; want v", v, err)
	}
	// RestartEmpty loses it.
	if err := m.RestartEmpty(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := n.Do(ctx, "GET", "k"); err != nil || v != nil {
		t.Fatalf("GET k after RestartEmpty = %v, %v; want nil", v, err)
	}
}

func strs(v any) []string {
	a, _ := v.([]any)
	s := make([]string, 0, len(a))
	for _, x := range a {
		if str, ok := x.(string); ok {
			s = append(s, str)
		}
	}
	return s
}

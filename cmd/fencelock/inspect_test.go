package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencelock/fencelock"
)

// TestInspectCommand: `inspect` prints each lock's holder (or free) from
// the store, as text and as one JSON object per lock, leaving out what the
// backend cannot report.
func TestInspectCommand(t *testing.T) {
	ctx := context.Background()
	const url = "mem://cli-inspect"
	c, err := fencelock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "held", &fencelock.AcquireOptions{Label: "worker-7"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	out, err := capture(t, func() error { return runInspect(ctx, []string{"--url", url, "held", "free"}) })
	if err != nil {
		t.Fatal(err)
	}
	want := `held: held by "worker-7", fence ` + l.Fence().String()
	if !strings.Contains(out, want) || !strings.Contains(out, "waiters ?") || !strings.Contains(out, "free: free") {
		t.Fatalf("inspect output:\n%s\nwant a line with %q, waiters unknown, and free", out, want)
	}
	out, err = capture(t, func() error { return runInspect(ctx, []string{"--url", url, "--json", "held", "free"}) })
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("--json: %d lines, want 2:\n%s", len(lines), out)
	}
	var held, free map[string]any
	if json.Unmarshal([]byte(lines[0]), &held) != nil || json.Unmarshal([]byte(lines[1]), &free) != nil {
		t.Fatalf("--json lines are not JSON objects:\n%s", out)
	}
	if held["held"] != true || held["label"] != "worker-7" || held["fence"] != float64(l.Fence()) || held["remaining_ms"] == nil {
		t.Fatalf("--json held: %v", held)
	}
	if _, ok := held["waiters"]; ok {
		t.Fatalf("--json reports waiters the mem backend cannot count: %v", held)
	}
	if free["held"] != false || free["name"] != "free" {
		t.Fatalf("--json free: %v", free)
	}
}

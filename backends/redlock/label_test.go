package redlock_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redlock"
)

// TestInspectReportsNewestLabel: a SetLabel is done once a majority
// stored it, so an Inspect may read primaries it has not reached yet;
// Inspect must report the newest label among the primaries it read, not
// whichever it read first. The lag is staged by writing the grant's label
// back on two of five primaries.
func TestInspectReportsNewestLabel(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	n := name(t)
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 30 * time.Second, Label: "first"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := l.SetLabel(ctx, "second"); err != nil {
		t.Fatal(err)
	}
	redlock.Idle(c) // the relabel has reached every primary
	tokens := holders(ctx, m, n)
	if count(tokens, tokens[0]) != 5 || tokens[0] == "" {
		t.Fatalf("lock key per primary: %q, want one token on all five", tokens)
	}
	key := redlock.LabelKey(n, tokens[0])
	for _, node := range m.Nodes[:2] {
		// What a primary the relabel had not reached holds: the grant's label.
		if _, err := node.Do(ctx, "SET", key, "0 first", "PX", "30000"); err != nil {
			t.Fatal(err)
		}
	}
	info, err := c.Inspect(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Label != "second" {
		t.Fatalf("Inspect: %+v, want held with the newest label %q", info, "second")
	}
	// The next relabel carries the next version, over the stale ones too.
	if err := l.SetLabel(ctx, "third"); err != nil {
		t.Fatal(err)
	}
	redlock.Idle(c)
	for i, v := range holders(ctx, m, key) {
		if v != "2 third" {
			t.Fatalf("primary %d label key %q, want %q", i, v, "2 third")
		}
	}
}

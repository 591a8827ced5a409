package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redlock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestReleaseDropsLabel: a labelled grant's label key goes with its lock
// key on every primary, whether a release frees the lock (no waiter), or
// a release hands the lock to a blocked waiter: the lead's release script
// frees it there, and the other primaries' keys, left to the waiter (see
// Hand-off in lease.go: only a lease that had to wait hands off), are
// freed by the waiter's take-over of the released token's key.
func TestReleaseDropsLabel(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	n := name(t)
	type result struct {
		l   *fencelock.Lease
		err error
	}
	// blocked starts a labelled Acquire on its own Client, which must wait.
	blocked := func(label string) (<-chan result, *fencelock.Client) {
		c := open(t, m.URL(), nil)
		held := make(chan result, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			l, err := c.Acquire(wctx, n, &fencelock.AcquireOptions{TTL: 30 * time.Second, Label: label})
			held <- result{l, err}
		}()
		waitQueued(t, m, n)
		return held, c
	}
	// holder is the token on a majority of primaries once c is idle (a
	// primary the previous release had not reached yet may have refused
	// it), and the primaries that hold it.
	holder := func(c *fencelock.Client) (string, []bool) {
		t.Helper()
		redlock.Idle(c)
		tokens := holders(ctx, m, n)
		for _, tok := range tokens {
			if tok != "" && tok != "?" && count(tokens, tok) >= 3 {
				at := make([]bool, len(tokens))
				for i := range tokens {
					at[i] = tokens[i] == tok
				}
				return tok, at
			}
		}
		t.Fatalf("lock key per primary %q, want one token on a majority", tokens)
		return "", nil
	}
	// freed releases l, held by c, labelled label, and once the waiter
	// (next, on its Client cn; or none) holds and every Client is idle,
	// checks that l's label keys are gone. It returns the waiter's lease.
	freed := func(l *fencelock.Lease, c *fencelock.Client, label string, next <-chan result, cn *fencelock.Client) *fencelock.Lease {
		t.Helper()
		token, at := holder(c)
		for i, v := range holders(ctx, m, redlock.LabelKey(n, token)) {
			if at[i] && v != "0 "+label {
				t.Fatalf("%s's label key on primary %d holds %q, want %q", label, i, v, "0 "+label)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var nl *fencelock.Lease
		if next != nil {
			r := <-next
			if r.err != nil {
				t.Fatal(r.err)
			}
			nl = r.l
			redlock.Idle(cn)
		}
		redlock.Idle(c)
		if got := holders(ctx, m, redlock.LabelKey(n, token)); count(got, "") != 5 {
			t.Fatalf("after %s's release its label keys per primary hold %q, want none", label, got)
		}
		return nl
	}
	a, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 30 * time.Second, Label: "a"})
	if err != nil {
		t.Fatal(err)
	}
	heldB, cb := blocked("b")
	b := freed(a, c, "a", heldB, cb)
	heldC, cc := blocked("c") // b waited: its release hands off
	l := freed(b, cb, "b", heldC, cc)
	freed(l, cc, "c", nil, nil) // nobody waits
}

// waitQueued returns once a waiter is in n's queue on the lead primary.
func waitQueued(t *testing.T, m *testserver.RedisNodes, n string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if v, err := m.Nodes[0].Do(t.Context(), "ZCARD", redlock.QueueKey(n)); err == nil && v != int64(0) {
			return
		}
	}
	t.Fatal("no waiter queued within 30s")
}

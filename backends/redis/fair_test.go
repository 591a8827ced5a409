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
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// queued polls the server until n entries are in name's waiter line (a state the
// server reports, not a sleep), failing after 10s.
func queued(t *testing.T, rc goredis.UniversalClient, name string, n int64) {
	t.Helper()
	testhelp.Eventually(t, 10*time.Second, func() error {
		got, err := rc.LLen(t.Context(), redis.QueueKey(name)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			return fmt.Errorf("%d waiters queued on %q, want %d", got, name, n)
		}
		return nil
	})
}

type grantResult struct {
	who int
	l   *fencelock.Lease
	err error
}

var hold = &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)}

// TestReleaseHandsOffInOrder: waiters on three Clients queue in the order
// they blocked; each release hands the lock straight to the next in line,
// with a higher fence, and the waiter sends nothing for it: the release is
// the only script the server runs per hand-off. Each grant is one message,
// on the waiting Client's own grant channel: the other waiting Clients are
// not woken by it.
func TestReleaseHandsOffInOrder(t *testing.T) {
	r := testserver.StartRedisProcess(t) // fresh: commandstats count only this test
	a := open(t, r.URL(), nil, nil)
	rc := native(t, a)
	ctx := t.Context()
	n := name(t)
	// An observer of every channel of the lock: its release channel and
	// every Client's grant channel for it.
	obs := rc.PSubscribe(ctx, redis.ReleaseChannel(n)+"*")
	defer obs.Close()
	if _, err := obs.Receive(ctx); err != nil { // the subscription is in effect
		t.Fatal(err)
	}
	seen := map[string]bool{} // grant channels seen
	l, err := a.TryAcquire(ctx, n, hold)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan grantResult, 3)
	for i := range 3 {
		w := open(t, r.URL(), nil, nil)
		go func() {
			l, err := w.Acquire(ctx, n, hold)
			got <- grantResult{i, l, err}
		}()
		queued(t, rc, n, int64(i+1))
	}
	prev := l
	for i := range 3 {
		before := commandCalls(t, rc)
		if err := prev.Release(ctx); err != nil {
			t.Fatal(err)
		}
		g := <-got
		if g.err != nil {
			t.Fatal(g.err)
		}
		if g.who != i {
			t.Fatalf("release %d went to waiter %d, want %d (arrival order)", i, g.who, i)
		}
		if g.l.Fence() <= prev.Fence() {
			t.Fatalf("hand-off %d: fence %d after %d", i, g.l.Fence(), prev.Fence())
		}
		if d := commandCalls(t, rc) - before; d != 1 {
			t.Fatalf("hand-off %d ran %d scripts, want 1 (the release; the waiter is handed the lock)", i, d)
		}
		m, err := obs.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		grantCh, ok := strings.CutPrefix(m.Channel, redis.ReleaseChannel(n)+":")
		if !ok || len(grantCh) != 32 || seen[grantCh] || !strings.HasPrefix(m.Payload, "grant ") {
			t.Fatalf("hand-off %d published %q on %q, want a grant on a grant channel of the waiter's own Client (seen: %v)", i, m.Payload, m.Channel, seen)
		}
		seen[grantCh] = true
		if tok := rc.Get(ctx, n).Val(); tok == "" {
			t.Fatalf("hand-off %d: lock key empty while waiter %d holds", i, i)
		}
		prev = g.l
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Nobody in line: nobody to tell, so the release publishes nothing.
	// A marker published after it must be the next message the observer
	// gets (one server, one connection each: messages arrive in order).
	if err := rc.Publish(ctx, redis.ReleaseChannel(n), "marker").Err(); err != nil {
		t.Fatal(err)
	}
	if m, err := obs.ReceiveMessage(ctx); err != nil || m.Channel != redis.ReleaseChannel(n) || m.Payload != "marker" {
		t.Fatalf("last release (nobody in line) published %v (%v), want nothing", m, err)
	}
	if k := rc.Exists(ctx, n, redis.QueueKey(n)).Val(); k != 0 {
		t.Fatalf("%d of the lock key and the queue remain after the last release, want none", k)
	}
}

// TestCancelledWaiterLeavesLine: a waiter whose ctx ends leaves the queue
// (and its liveness key) before Acquire returns, so the next release does
// not hand the lock to it.
func TestCancelledWaiterLeavesLine(t *testing.T) {
	r := testserver.StartRedis(t)
	a, w, x := open(t, r.URL(), nil, nil), open(t, r.URL(), nil, nil), open(t, r.URL(), nil, nil)
	rc := native(t, a)
	ctx := t.Context()
	n := name(t)
	l, err := a.TryAcquire(ctx, n, hold)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := w.Acquire(wctx, n, hold)
		done <- err
	}()
	queued(t, rc, n, 1)
	token := rc.LIndex(ctx, redis.QueueKey(n), 0).Val()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire returned %v, want context.Canceled", err)
	}
	if k := rc.Exists(ctx, redis.QueueKey(n), redis.WaitKey(n, token)).Val(); k != 0 {
		t.Fatal("the cancelled waiter is still in line after Acquire returned")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := x.TryAcquire(ctx, n, hold)
	if err != nil {
		t.Fatalf("TryAcquire after the release, with the only waiter gone: %v", err)
	}
	_ = l2.Release(ctx)
}

// TestWaitersGoFirst: while a live waiter is in line, a free lock is not
// taken by TryAcquire (no barging); once the waiter's liveness key expires
// (a waiter that died), it drops out of line by itself.
func TestWaitersGoFirst(t *testing.T) {
	r := testserver.StartRedis(t)
	c := open(t, r.URL(), nil, nil)
	rc := native(t, c)
	ctx := t.Context()
	n := name(t)
	const ghost = "0123456789abcdef0123456789abcdef" // a waiter that died in line
	rc.RPush(ctx, redis.QueueKey(n), ghost)
	rc.Set(ctx, redis.WaitKey(n, ghost), "30000", 300*time.Millisecond)
	_, err := c.TryAcquire(ctx, n, hold)
	if !errors.Is(err, fencelock.ErrNotAcquired) || !strings.Contains(err.Error(), "queued") {
		t.Fatalf("TryAcquire with a live waiter in line: %v, want ErrNotAcquired saying waiters queued first", err)
	}
	testhelp.Eventually(t, 10*time.Second, func() error {
		if rc.Exists(ctx, redis.WaitKey(n, ghost)).Val() == 1 { // the server expires it
			return errors.New("liveness key did not expire")
		}
		return nil
	})
	l, err := c.TryAcquire(ctx, n, hold)
	if err != nil {
		t.Fatalf("TryAcquire once the dead waiter's liveness ran out: %v", err)
	}
	defer l.Release(ctx)
	if k := rc.Exists(ctx, redis.QueueKey(n)).Val(); k != 0 {
		t.Fatal("the dead waiter is still in the queue")
	}
}

package redis

import (
	"errors"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
)

const tokC = "cccccccccccccccccccccccccccccccc"

// line returns the waiter line of k on the server.
func line(t *testing.T, b *backend, k keys) []string {
	t.Helper()
	l, err := b.client.LRange(t.Context(), k.queue, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// wantLine fails t unless k's line holds want, in order.
func wantLine(t *testing.T, b *backend, k keys, when string, want ...string) {
	t.Helper()
	if got := line(t, b, k); !slices.Equal(got, want) {
		t.Fatalf("%s: line %q, want %q", when, got, want)
	}
}

// queue runs one queued attempt of req (live ms of liveness) and expects
// a refusal.
func queue(t *testing.T, b *backend, k keys, req driver.AcquireRequest, live time.Duration) {
	t.Helper()
	if _, err := b.attempt(t.Context(), k, req, live, b.hub.id); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("queued attempt of %s: %v, want ErrNotAcquired", req.Token[:4], err)
	}
}

// TestLapsedWaiterGrantedOnce: a waiter whose liveness lapsed and who
// refreshes joins the line again, so its token is in line twice; the
// hand-off grants it once (GETDEL of its liveness key) and the next one
// drops the stale entry and goes on to the next waiter.
func TestLapsedWaiterGrantedOnce(t *testing.T) {
	b, rc := newTestBackend(t)
	ctx := t.Context()
	name := uniqueName(t)
	k := keysFor(name)
	reqA := driver.AcquireRequest{Name: name, Token: tokA, TTL: 30 * time.Second}
	reqB, reqC := reqA, reqA
	reqB.Token, reqC.Token = tokB, tokC
	a, err := b.TryAcquire(ctx, reqA)
	if err != nil {
		t.Fatal(err)
	}
	queue(t, b, k, reqB, 30*time.Second)
	queue(t, b, k, reqB, 30*time.Second) // a refresh keeps the place
	wantLine(t, b, k, "after a join and a refresh", tokB)
	if err := rc.Del(ctx, k.wait(tokB)).Err(); err != nil { // its liveness lapses
		t.Fatal(err)
	}
	queue(t, b, k, reqB, 30*time.Second) // the next refresh joins again
	queue(t, b, k, reqC, 30*time.Second)
	wantLine(t, b, k, "after a lapse", tokB, tokB, tokC)

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rc.Get(ctx, name).Val(); got != tokB {
		t.Fatalf("after the release the lock key holds %q, want B's token", got)
	}
	wantLine(t, b, k, "after the hand-off to B", tokB, tokC)
	if n := rc.Exists(ctx, k.wait(tokB)).Val(); n != 0 {
		t.Fatal("B's liveness key survived its hand-off")
	}
	// B learns its grant (here from its own attempt, which answers it).
	lb, err := b.TryAcquire(ctx, reqB)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", lb.Fence(), a.Fence())
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rc.Get(ctx, name).Val(); got != tokC {
		t.Fatalf("after B's release the lock key holds %q, want C's token (B's stale entry dropped)", got)
	}
	if n := rc.Exists(ctx, k.queue, k.wait(tokC)).Val(); n != 0 {
		t.Fatalf("%d of the line and C's liveness key remain after the line emptied", n)
	}
	lc, err := b.TryAcquire(ctx, reqC)
	if err != nil {
		t.Fatal(err)
	}
	if lc.Fence() <= lb.Fence() {
		t.Fatalf("C's fence %d not above B's %d", lc.Fence(), lb.Fence())
	}
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRefreshRestoresLine: a waiter whose entry is gone while its liveness
// key lives (the line was deleted) is back in line after its next refresh,
// and the line outlives every liveness key.
func TestRefreshRestoresLine(t *testing.T) {
	b, rc := newTestBackend(t)
	ctx := t.Context()
	name := uniqueName(t)
	k := keysFor(name)
	reqA := driver.AcquireRequest{Name: name, Token: tokA, TTL: 30 * time.Second}
	reqB := reqA
	reqB.Token = tokB
	a, err := b.TryAcquire(ctx, reqA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	queue(t, b, k, reqB, 100*time.Millisecond)
	if p := rc.PTTL(ctx, k.queue).Val(); p <= 5*time.Second || p > 6*time.Second {
		t.Fatalf("line PTTL %v after a join with 100ms liveness, want the 6s floor", p)
	}
	queue(t, b, k, reqB, 10*time.Second)
	if p := rc.PTTL(ctx, k.queue).Val(); p <= 19*time.Second || p > 20*time.Second {
		t.Fatalf("line PTTL %v after a refresh with 10s liveness, want twice that", p)
	}
	if err := rc.Del(ctx, k.queue).Err(); err != nil {
		t.Fatal(err)
	}
	queue(t, b, k, reqB, 10*time.Second)
	wantLine(t, b, k, "after a refresh of a waiter missing from the line", tokB)
}

// TestFreeLockGoesToHead: a free lock with live waiters in line goes only
// to the first of them, who leaves the line; abandoning removes every
// entry of a token.
func TestFreeLockGoesToHead(t *testing.T) {
	b, rc := newTestBackend(t)
	ctx := t.Context()
	name := uniqueName(t)
	k := keysFor(name)
	reqA := driver.AcquireRequest{Name: name, Token: tokA, TTL: 30 * time.Second}
	reqB, reqC := reqA, reqA
	reqB.Token, reqC.Token = tokB, tokC
	if _, err := b.TryAcquire(ctx, reqA); err != nil {
		t.Fatal(err)
	}
	queue(t, b, k, reqB, 30*time.Second)
	queue(t, b, k, reqC, 30*time.Second)
	if err := rc.Del(ctx, name).Err(); err != nil { // A's lease expires
		t.Fatal(err)
	}
	var r *refused
	if _, err := b.TryAcquire(ctx, driver.AcquireRequest{Name: name, Token: tokA, TTL: time.Second}); !errors.As(err, &r) || r.pttl != queuedFirst {
		t.Fatalf("TryAcquire of a free lock with waiters in line: %v, want refused, waiters queued first", err)
	}
	queue(t, b, k, reqC, 30*time.Second) // C is second: refused
	lb, err := b.attempt(ctx, k, reqB, 30*time.Second, b.hub.id)
	if err != nil {
		t.Fatalf("the head's attempt on the free lock: %v", err)
	}
	wantLine(t, b, k, "after the head took the lock", tokC)
	if n := rc.Exists(ctx, k.wait(tokB)).Val(); n != 0 {
		t.Fatal("the head's liveness key survived its grant")
	}
	// C is in line twice; abandoning removes both entries.
	rc.Del(ctx, k.wait(tokC))
	queue(t, b, k, reqC, 30*time.Second)
	wantLine(t, b, k, "after C lapsed and refreshed", tokC, tokC)
	if err := b.cleanup(ctx, k, reqC, errors.New("cancelled")); err == nil {
		t.Fatal("cleanup returned nil, want its cause")
	}
	if n := rc.Exists(ctx, k.queue, k.wait(tokC)).Val(); n != 0 {
		t.Fatal("the abandoned waiter is still in line")
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOldQueueIgnored: a waiter of an earlier version (in the sorted set
// <base>:queue) neither breaks this version's scripts (no WRONGTYPE: the
// line is another key) nor is served by them: the lock stays one holder's.
func TestOldQueueIgnored(t *testing.T) {
	b, rc := newTestBackend(t)
	ctx := t.Context()
	name := uniqueName(t)
	k := keysFor(name)
	old := k.base + ":queue"
	if err := rc.ZAdd(ctx, old, goredis.Z{Score: 1, Member: tokC}).Err(); err != nil {
		t.Fatal(err)
	}
	rc.Set(ctx, k.wait(tokC), "30000", 30*time.Second)
	reqA := driver.AcquireRequest{Name: name, Token: tokA, TTL: 30 * time.Second}
	reqB := reqA
	reqB.Token = tokB
	a, err := b.TryAcquire(ctx, reqA)
	if err != nil {
		t.Fatalf("TryAcquire beside an old version's queue: %v", err)
	}
	queue(t, b, k, reqB, 30*time.Second)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rc.Get(ctx, name).Val(); got != tokB {
		t.Fatalf("after the release the lock key holds %q, want B's token", got)
	}
	if n := rc.ZCard(ctx, old).Val(); n != 1 {
		t.Fatalf("the old queue holds %d, want its 1 waiter untouched", n)
	}
}

// TestSharedBaseLinesApart: the lock keys "x" and "{x}" share a base (so a
// fence key and a channel), but not a line: releasing "x" never hands it
// to a waiter of "{x}".
func TestSharedBaseLinesApart(t *testing.T) {
	b, rc := newTestBackend(t)
	ctx := t.Context()
	x := uniqueName(t)
	y := "{" + x + "}"
	kx, ky := keysFor(x), keysFor(y)
	if kx.base != ky.base {
		t.Fatalf("keys of %q: %+v; of %q: %+v; want one base", x, kx, y, ky)
	}
	a, err := b.TryAcquire(ctx, driver.AcquireRequest{Name: x, Token: tokA, TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, driver.AcquireRequest{Name: y, Token: tokB, TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	queue(t, b, ky, driver.AcquireRequest{Name: y, Token: tokC, TTL: 30 * time.Second}, 30*time.Second)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rc.Exists(ctx, x).Val(); n != 0 {
		t.Fatalf("releasing %q handed it to %q, a waiter of %q", x, rc.Get(ctx, x).Val(), y)
	}
	wantLine(t, b, ky, "after the release of the other lock", tokC)
}

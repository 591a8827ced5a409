package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redis"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

func TestMain(m *testing.M) {
	// The process-freeze check re-executes this binary as its child: run
	// the child before any test starts a server.
	conformance.MaybeRunChild()
	goleak.VerifyTestMain(m)
}

// noBackoff makes a blocked Acquire rely on the Waiter alone: each wait is
// bounded by 10s, so a wake-up that comes sooner came from the waiter.
func noBackoff(int) time.Duration { return 10 * time.Second }

// open returns a Client on url, closed at cleanup; configure may be nil.
func open(t testing.TB, url string, opts *fencelock.Options, configure func(*goredis.UniversalOptions)) *fencelock.Client {
	t.Helper()
	var mux fencelock.URLMux
	mux.Register(redis.Scheme, &redis.URLOpener{Configure: configure})
	c, err := mux.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func native(t testing.TB, c *fencelock.Client) goredis.UniversalClient {
	t.Helper()
	var rc goredis.UniversalClient
	if !c.As(&rc) {
		t.Fatal("As(*goredis.UniversalClient) = false")
	}
	return rc
}

func name(t testing.TB) string {
	return fmt.Sprintf("fencelock-test:%s:%d", t.Name(), rand.Uint32())
}

// TestKeyLayout checks the documented layout: the lock key is the name
// holding the token with a PX expiry; the fence key has no TTL and
// survives release.
func TestKeyLayout(t *testing.T) {
	r := testserver.StartRedis(t)
	c := open(t, r.URL(), &fencelock.Options{Prefix: "app:"}, nil)
	rc := native(t, c)
	ctx := t.Context()
	n := name(t)
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key := "app:" + n
	tok, err := rc.Get(ctx, key).Result()
	if err != nil || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(tok) {
		t.Fatalf("lock key %q holds %q (%v), want a 32-hex owner token", key, tok, err)
	}
	if p := rc.PTTL(ctx, key).Val(); p <= 0 || p > 5*time.Second {
		t.Fatalf("lock key PTTL %v, want (0, 5s]", p)
	}
	fenceKey := "{" + key + "}:fence"
	if v, err := rc.Get(ctx, fenceKey).Uint64(); err != nil || v != uint64(l.Fence()) {
		t.Fatalf("fence key %q = %d (%v), want the lease's fence %d", fenceKey, v, err, l.Fence())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rc.Exists(ctx, key).Val() != 0 {
		t.Fatal("lock key still there after Release")
	}
	if p := rc.PTTL(ctx, fenceKey).Val(); p != -1 {
		t.Fatalf("fence key PTTL after Release = %v, want -1 (kept, no TTL)", p)
	}
	// Fences are microsecond timestamps (time floor), well inside int64.
	if f := time.UnixMicro(l.Fence().Int64()); time.Since(f).Abs() > time.Hour {
		t.Errorf("fence %d is not near the server's time in µs (%v)", l.Fence(), f)
	}
}

// TestInteropWithRedisPyShape: a non-Go worker locking the same key the
// redis-py / redsync way (SET key token NX PX ttl) excludes us and is
// excluded by us; a key without expiry is never taken over.
func TestInteropWithRedisPyShape(t *testing.T) {
	r := testserver.StartRedis(t)
	c := open(t, r.URL(), &fencelock.Options{Backoff: fencelock.ExponentialBackoff(time.Millisecond, 5*time.Millisecond)}, nil)
	rc := native(t, c)
	ctx := t.Context()
	n := name(t)

	// A "python" holder with a 300ms timeout excludes us until it expires.
	if !rc.SetNX(ctx, n, "python-token", 300*time.Millisecond).Val() {
		t.Fatal("SET NX failed on a fresh key")
	}
	_, err := c.TryAcquire(ctx, n, nil)
	if !errors.Is(err, fencelock.ErrNotAcquired) || !strings.Contains(err.Error(), "expires in") {
		t.Fatalf("TryAcquire over a foreign holder: %v, want ErrNotAcquired saying when it expires", err)
	}
	start := time.Now()
	l, err := c.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: 5 * time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Acquire after a foreign holder's 300ms expiry took %v", took)
	}
	// Now we hold it: the python-style SET NX fails, and its
	// compare-and-delete (wrong token) deletes nothing.
	if rc.SetNX(ctx, n, "python-token-2", time.Second).Val() {
		t.Fatal("a redis-py style SET NX succeeded while we held the lock")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A key without expiry (redis-py timeout=None) is never taken over.
	if err := rc.Set(ctx, n, "forever", 0).Err(); err != nil {
		t.Fatal(err)
	}
	defer rc.Del(context.Background(), n)
	_, err = c.TryAcquire(ctx, n, nil)
	if !errors.Is(err, fencelock.ErrNotAcquired) || !strings.Contains(err.Error(), "no expiry") {
		t.Fatalf("TryAcquire over a key without expiry: %v, want ErrNotAcquired explaining it", err)
	}
	_, err = c.Acquire(ctx, n, &fencelock.AcquireOptions{Wait: 300 * time.Millisecond})
	if !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("Acquire over a key without expiry: %v, want ErrNotAcquired", err)
	}
	if v := rc.Get(ctx, n).Val(); v != "forever" {
		t.Fatalf("the foreign key was changed to %q", v)
	}
}

// TestWaitersShareOneConnection: many waiters on one Client use two
// pub/sub connections, the lane's (one waiter) and the hub's (all the
// others), and all end with Close.
func TestWaitersShareOneConnection(t *testing.T) {
	r := testserver.StartRedis(t)
	tag := fmt.Sprintf("fl-waiters-%d", rand.Uint32())
	holder := open(t, r.URL(), nil, nil)
	waiters := open(t, r.URL(), &fencelock.Options{Backoff: noBackoff}, func(o *goredis.UniversalOptions) { o.ClientName = tag })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		nm := fmt.Sprintf("%s-%d", name(t), i)
		l, err := holder.TryAcquire(ctx, nm, &fencelock.AcquireOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		wg.Go(func() {
			_, err := waiters.Acquire(ctx, nm, nil)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("waiter: %v, want context.Canceled", err)
			}
		})
	}
	rc := native(t, holder)
	deadline := time.Now().Add(10 * time.Second)
	for {
		list := rc.ClientList(ctx).Val()
		var subs []int
		var lines []string
		for line := range strings.SplitSeq(list, "\n") {
			if strings.Contains(line, "name="+tag+" ") && strings.Contains(line, "flags=P") {
				lines = append(lines, line)
				if m := regexp.MustCompile(` sub=(\d+) `).FindStringSubmatch(line); m != nil {
					var s int
					fmt.Sscan(m[1], &s)
					subs = append(subs, s)
				}
			}
		}
		if len(lines) > 2 {
			t.Fatalf("%d pub/sub connections for %d waiters, want 2 (lane and hub):\n%s", len(lines), n, strings.Join(lines, "\n"))
		}
		slices.Sort(subs)
		// Each lock's channel and the Client's grant channel for it: the
		// lane's for one lock, the hub's for the others.
		if slices.Equal(subs, []int{2, 2 * (n - 1)}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pub/sub connections have %v subscriptions, want [2 %d]:\n%s", subs, 2*(n-1), strings.Join(lines, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
}

// TestReleaseWakesWaiterNotMissed: whenever the release lands relative to
// the waiter's attempt (before its subscription, between subscription and
// check, while it blocks), the waiter is woken at once, never by its 10s
// fallback bound.
func TestReleaseWakesWaiterNotMissed(t *testing.T) {
	r := testserver.StartRedis(t)
	a := open(t, r.URL(), nil, nil)
	w := open(t, r.URL(), &fencelock.Options{Backoff: noBackoff}, nil)
	ctx := t.Context()
	n := name(t)
	var worst time.Duration
	for i := range 60 {
		l, err := a.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l2, err := w.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)})
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		// Spread the release over the waiter's first attempt: 0–1.5ms.
		time.Sleep(time.Duration(i%16) * 100 * time.Microsecond)
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			worst = max(worst, time.Since(released))
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: waiter not woken 5s after the release (a missed notification)", i)
		}
	}
	t.Logf("slowest hand-off %v", worst)
}

// TestExpiryWakesWaiter: expiry publishes nothing; the waiter wakes when
// the holder's TTL runs out, not at its 10s fallback bound.
func TestExpiryWakesWaiter(t *testing.T) {
	r := testserver.StartRedis(t)
	a := open(t, r.URL(), nil, nil)
	w := open(t, r.URL(), &fencelock.Options{Backoff: noBackoff}, nil)
	ctx := t.Context()
	n := name(t)
	l, err := a.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 300 * time.Millisecond, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l2, err := w.Acquire(ctx, n, &fencelock.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
		t.Fatalf("Acquire behind a 300ms abandoned lease returned after %v", took)
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after expiry, not above %d", l2.Fence(), l.Fence())
	}
}

// TestOneWaiterWinsPerRelease: with several clients blocked, each release
// hands the lock to exactly one of them, promptly, with a higher fence.
func TestOneWaiterWinsPerRelease(t *testing.T) {
	r := testserver.StartRedis(t)
	n := name(t)
	ctx := t.Context()
	holder := open(t, r.URL(), nil, nil)
	l, err := holder.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	won := make(chan *fencelock.Lease, waiters)
	for range waiters {
		c := open(t, r.URL(), &fencelock.Options{Backoff: noBackoff}, nil)
		go func() {
			l, err := c.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: 30 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			won <- l
		}()
	}
	prev := l.Fence()
	for i := range waiters {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case l = <-won:
		case <-time.After(5 * time.Second):
			t.Fatalf("release %d: no waiter got the lock within 5s", i)
		}
		select {
		case l2 := <-won:
			t.Fatalf("release %d: two waiters got the lock (fences %d and %d)", i, l.Fence(), l2.Fence())
		case <-time.After(100 * time.Millisecond):
		}
		if l.Fence() <= prev {
			t.Fatalf("release %d: fence %d not above %d", i, l.Fence(), prev)
		}
		prev = l.Fence()
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAs(t *testing.T) {
	r := testserver.StartRedis(t)
	c := open(t, r.URL(), nil, nil)
	var rc *goredis.Client
	var cc *goredis.ClusterClient
	var uc goredis.UniversalClient
	if !c.As(&rc) || rc == nil || !c.As(&uc) || uc == nil || c.As(&cc) || c.As(new(int)) || c.As(nil) {
		t.Fatalf("As: *Client %v, UniversalClient %v, ClusterClient %v", rc != nil, uc != nil, cc != nil)
	}
	if err := rc.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	// New takes a caller's client and leaves it open on Close.
	own := goredis.NewClient(&goredis.Options{Addr: rc.Options().Addr})
	defer own.Close()
	c2, err := redis.New(own, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := own.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("caller's client closed by Client.Close: %v", err)
	}
}

func TestOpenRejectsUnknownParams(t *testing.T) {
	_, err := fencelock.Open(t.Context(), "redis://127.0.0.1:6379/0?timeout=1s")
	if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("Open with an unknown parameter: %v, want ErrInvalid naming it", err)
	}
	for _, s := range []string{"redis", "rediss"} {
		found := false
		for _, r := range fencelock.Schemes() {
			found = found || r == s
		}
		if !found {
			t.Errorf("scheme %s not registered", s)
		}
	}
}

// TestScriptCacheFlushed: the scripts run by EVALSHA fall back to EVAL
// when the server has lost its script cache (a restart, SCRIPT FLUSH).
func TestScriptCacheFlushed(t *testing.T) {
	r := testserver.StartRedis(t)
	c := open(t, r.URL(), nil, nil)
	rc := native(t, c)
	ctx := t.Context()
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	for i := range 3 {
		if err := rc.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		l, err := c.TryAcquire(ctx, "flushed", opts)
		if err != nil {
			t.Fatalf("cycle %d: TryAcquire after SCRIPT FLUSH: %v", i, err)
		}
		if err := rc.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("cycle %d: Release after SCRIPT FLUSH: %v", i, err)
		}
	}
	if n, err := rc.Exists(ctx, "flushed").Result(); err != nil || n != 0 {
		t.Fatalf("lock key after Release: exists %d, %v", n, err)
	}
}

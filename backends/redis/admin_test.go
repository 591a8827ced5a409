package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redis"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// clientConns returns the IDs of the server's connections named name.
func clientConns(t testing.TB, rc goredis.UniversalClient, name string) map[string]bool {
	t.Helper()
	list, err := rc.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for line := range strings.SplitSeq(list, "\n") {
		var id string
		named := false
		for f := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			named = named || f == "name="+name
		}
		if named {
			ids[id] = true
		}
	}
	return ids
}

// TestAdminExpire: Expire deletes the lock key whoever holds it, keeps the
// fence key, and the holder's next renewal reports the loss.
func TestAdminExpire(t *testing.T) {
	r := testserver.StartRedis(t)
	a := open(t, r.URL(), nil, nil)
	b := open(t, r.URL(), nil, nil)
	rc := native(t, b)
	ctx := t.Context()
	n := name(t)
	l, err := a.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fenceKey := redis.FenceKey(n)
	if err := testhelp.Admin(t, b).Expire(ctx, n); err != nil { // another client's Admin: owner-agnostic
		t.Fatal(err)
	}
	if rc.Exists(ctx, n).Val() != 0 {
		t.Fatal("lock key still there after Expire")
	}
	if v, err := rc.Get(ctx, fenceKey).Uint64(); err != nil || v != uint64(l.Fence()) {
		t.Fatalf("fence key after Expire = %d (%v), want %d kept", v, err, l.Fence())
	}
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("lease not reported lost 2s after Expire (renewal every 100ms)")
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err after Expire: %v, want ErrLeaseLost", l.Err())
	}
	if err := testhelp.Admin(t, b).Expire(ctx, n); err != nil {
		t.Fatalf("Expire of a free lock: %v, want nil", err)
	}
}

// TestAdminKillSessions: KillSessions drops exactly this client's locks
// and connections (its pub/sub connection included); another client's
// lock and connections are untouched; the client reconnects afterwards.
func TestAdminKillSessions(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := t.Context()
	a := open(t, r.URL(), nil, nil)
	b := open(t, r.URL(), nil, nil)
	obs := native(t, open(t, r.URL(), nil, nil))
	var ao, bo *goredis.Client
	if !a.As(&ao) || !b.As(&bo) {
		t.Fatal("As(**goredis.Client)")
	}
	aName, bName := ao.Options().ClientName, bo.Options().ClientName
	if !strings.HasPrefix(aName, "fencelock-") || aName == bName {
		t.Fatalf("client names %q and %q: want unique fencelock-… names", aName, bName)
	}
	n := name(t)
	la, err := a.TryAcquire(ctx, n+"-a", &fencelock.AcquireOptions{TTL: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, n+"-b", &fencelock.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(context.Background())
	// A waiter of a's, so a has a pub/sub connection too.
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = a.Acquire(wctx, n+"-b", nil) })
	defer func() { cancel(); wg.Wait() }()
	testhelp.Eventually(t, 5*time.Second, func() error {
		if n := len(clientConns(t, obs, aName)); n < 2 {
			return fmt.Errorf("client a has %d connections, want ≥ 2 (commands + pub/sub)", n)
		}
		return nil
	})
	aBefore, bBefore := clientConns(t, obs, aName), clientConns(t, obs, bName)

	if err := testhelp.Admin(t, a).KillSessions(ctx); err != nil {
		t.Fatal(err)
	}
	// a may have reconnected already (its renewal, its waiter): none of
	// its earlier connections may be left.
	for id := range clientConns(t, obs, aName) {
		if aBefore[id] {
			t.Fatalf("connection %s of client a still there after KillSessions", id)
		}
	}
	bAfter := clientConns(t, obs, bName)
	for id := range bBefore {
		if !bAfter[id] {
			t.Fatalf("connection %s of client b killed by a's KillSessions", id)
		}
	}
	if obs.Exists(ctx, n+"-a").Val() != 0 {
		t.Fatal("a's lock still held after KillSessions")
	}
	if obs.Get(ctx, n+"-b").Val() == "" || lb.Err() != nil {
		t.Fatalf("b's lock touched by a's KillSessions: %v", lb.Err())
	}
	select {
	case <-la.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("a's lease not reported lost 2s after KillSessions")
	}
	if !errors.Is(la.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err after KillSessions: %v", la.Err())
	}
	// a reconnects for new requests.
	l2, err := a.TryAcquire(ctx, n+"-a", nil)
	if err != nil {
		t.Fatalf("TryAcquire after KillSessions: %v", err)
	}
	if l2.Fence() <= la.Fence() {
		t.Fatalf("fence %d after KillSessions, not above %d", l2.Fence(), la.Fence())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestKillSessionsNeedsClientName: a caller's go-redis client without a
// client name cannot tell its connections from others': ErrInvalid.
func TestKillSessionsNeedsClientName(t *testing.T) {
	r := testserver.StartRedis(t)
	o, err := goredis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	rc := goredis.NewClient(o)
	defer rc.Close()
	c, err := redis.New(rc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = testhelp.Admin(t, c).KillSessions(t.Context())
	if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), "ClientName") {
		t.Fatalf("KillSessions without a client name: %v, want ErrInvalid naming ClientName", err)
	}
}

// TestGoRedisLogRouted: go-redis's own log lines (here: a pool that cannot
// dial) go to LogGoRedisTo's logger, not to stderr.
func TestGoRedisLogRouted(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	redis.LogGoRedisTo(slog.New(slog.NewTextHandler(&lockedBuf{mu: &mu, b: &buf}, nil)))
	defer redis.LogGoRedisTo(nil)
	c := open(t, "redis://127.0.0.1:1/0", nil, nil)
	_, err := c.TryAcquire(t.Context(), name(t), nil)
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("TryAcquire on a closed port: %v, want ErrUnavailable", err)
	}
	_ = c.Close()
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "go-redis: ") {
		t.Fatalf("no go-redis line reached the logger: %q", buf.String())
	}
}

type lockedBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TestOpenLeavesGoRedisLogger: opening a lock by URL does not replace the
// application's go-redis logger (it is process-wide): go-redis's own lines
// still reach the logger the application installed.
func TestOpenLeavesGoRedisLogger(t *testing.T) {
	var app appLogger
	goredis.SetLogger(&app)
	defer redis.LogGoRedisTo(nil)
	c := open(t, "redis://127.0.0.1:1/0", nil, nil)
	_, err := c.TryAcquire(t.Context(), name(t), nil)
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("TryAcquire on a closed port: %v, want ErrUnavailable", err)
	}
	_ = c.Close()
	if app.lines.Load() == 0 {
		t.Fatalf("the application's go-redis logger received nothing: opening a lock replaced it")
	}
}

// appLogger is an application's go-redis logger.
type appLogger struct{ lines atomic.Int64 }

func (l *appLogger) Printf(context.Context, string, ...any) { l.lines.Add(1) }

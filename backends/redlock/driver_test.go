package redlock_test

import (
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redlock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/adminhook"
)

// TestKeyLayout: on every primary the lock key is the name itself (no
// prefix given) holding a 32-hex token with a PX expiry, redsync's layout;
// the fence key is name+"\xff:fence" holding the lease's fence on at least
// a majority; Release deletes the lock key and leaves the fence key.
func TestKeyLayout(t *testing.T) {
	m := nodes(t, 3, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	const n = "orders:42"
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	redlock.Idle(c)
	vs := holders(ctx, m, n)
	for i, v := range vs {
		if len(v) != 32 || v != vs[0] {
			t.Fatalf("lock key on primary %d = %q, want the same 32-hex token everywhere (%q)", i, v, vs)
		}
		pttl, err := m.Nodes[i].Do(ctx, "PTTL", n)
		if p, _ := pttl.(int64); err != nil || p <= 0 || p > 5000 {
			t.Fatalf("PTTL on primary %d = %v, %v", i, pttl, err)
		}
	}
	stored := 0
	for _, f := range counters(t, ctx, m, n) {
		if f >= l.Fence() {
			stored++
		}
	}
	if stored < 2 {
		t.Fatalf("fence %d stored on %d primaries, want a majority", l.Fence(), stored)
	}
	if redlock.FenceKey(n) != n+"\xff:fence" {
		t.Fatalf("fence key %q", redlock.FenceKey(n))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redlock.Idle(c)
	if vs := holders(ctx, m, n); count(vs, "") != 3 {
		t.Fatalf("lock key after Release: %q", vs)
	}
	for i, f := range counters(t, ctx, m, n) {
		if f == 0 {
			t.Fatalf("fence key gone from primary %d after Release", i)
		}
	}
	if _, err := m.Nodes[0].Do(ctx, "SET", redlock.FenceKey(n), "not-a-number"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Nodes[1].Do(ctx, "SET", redlock.FenceKey(n), "not-a-number"); err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, n, nil)
	if err == nil || errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with a foreign fence key on a majority: %v, want the script's error", err)
	}
	t.Logf("foreign fence key: %q", err)
}

// TestNoExpiryKeyNeverTakenOver: a key without an expiry on a majority is
// reported and never taken over.
func TestNoExpiryKeyNeverTakenOver(t *testing.T) {
	m := nodes(t, 3, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	n := name(t)
	for _, nd := range m.Nodes[:2] {
		if _, err := nd.Do(ctx, "SET", n, "forever"); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.TryAcquire(ctx, n, nil)
	if !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a key without expiry: %v, want ErrNotAcquired", err)
	}
	t.Log(err)
	redlock.Idle(c)
	if vs := holders(ctx, m, n); vs[0] != "forever" || vs[1] != "forever" || vs[2] != "" {
		t.Fatalf("lock key per primary: %q", vs)
	}
}

func TestNewAndAs(t *testing.T) {
	m := nodes(t, 3, nil)
	ctx := t.Context()
	var cs []*goredis.Client
	for _, a := range m.Addrs() {
		c := goredis.NewClient(&goredis.Options{Addr: a, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	locks, err := redlock.New(cs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	caps := locks.Capabilities()
	if caps.Backend != "redlock" || caps.NodeLoss != driver.NodeLossQuorum || caps.Fence != driver.FenceTimeFloored || caps.Wait != driver.WaitNotify {
		t.Fatalf("capabilities %+v", caps)
	}
	var got []*goredis.Client
	if !locks.As(&got) || len(got) != 3 || got[0] != cs[0] {
		t.Fatalf("As: %v", got)
	}
	l, err := locks.TryAcquire(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Without a ClientName, KillSessions cannot tell our connections.
	adm, ok := adminhook.Of(locks)
	if !ok {
		t.Fatal("no driver.Admin")
	}
	if err := adm.KillSessions(ctx); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("KillSessions without ClientName: %v, want ErrInvalid", err)
	}
	// A prefix that is not UTF-8 would let a lock key meet the companion
	// keys' space.
	bad, err := redlock.New(cs, nil, &fencelock.Options{Prefix: "\xff"})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.TryAcquire(ctx, "x", nil); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("TryAcquire with a non-UTF-8 prefix: %v, want ErrInvalid", err)
	}
	for _, bad := range [][]*goredis.Client{nil, cs[:1], cs[:2], append(cs[:3:3], cs[0]), {cs[0], nil, cs[2]}} {
		if c, err := redlock.New(bad, nil, nil); !errors.Is(err, fencelock.ErrInvalid) || c != nil {
			t.Errorf("New with %d clients: %v, %v; want nil, ErrInvalid", len(bad), c, err)
		}
	}
}

package etcd

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/adminhook"
)

// TestRefreshSentAfterCall: concurrent refreshes of one class share
// keepalives, and every caller gets the send time of a keepalive sent after
// it called (validity counts from it): never one already in flight.
func TestRefreshSentAfterCall(t *testing.T) {
	cli, rc := countedClient(t, -1)
	c := mustNew(t, cli, nil, nil)
	defer c.Close()
	b := backendOf(t, c)
	cls, err := b.classFor(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	const callers, rounds = 100, 5
	var wg sync.WaitGroup
	var early, calls atomic.Int64
	for i := range callers {
		wg.Go(func() {
			for range rounds {
				t0 := time.Now()
				sent, granted, err := cls.refresh(t.Context(), i%10 == 0)
				if err != nil {
					t.Error(err)
					return
				}
				calls.Add(1)
				if sent.Before(t0) || granted < 2 {
					early.Add(1)
				}
			}
		})
	}
	wg.Wait()
	ka := rc.keepAlive.Load()
	t.Logf("%d refreshes, %d keepalives", calls.Load(), ka)
	if n := early.Load(); n != 0 {
		t.Fatalf("%d refreshes answered with a keepalive sent before they were called", n)
	}
	if ka >= calls.Load() {
		t.Fatalf("%d keepalives for %d concurrent refreshes: not shared", ka, calls.Load())
	}
}

// TestClassLeaseLossEndsAll: the leases of one TTL share an etcd lease;
// when it is revoked every one of them is lost at once, and the next
// acquisition gets a new class lease.
func TestClassLeaseLossEndsAll(t *testing.T) {
	e := newInteropEnv(t)
	c := e.client()
	o := &fencelock.AcquireOptions{TTL: 30 * time.Second}
	var ids []clientv3.LeaseID
	var ls []*fencelock.Lease
	for _, n := range []string{"a", "b", "c"} {
		l, err := c.TryAcquire(e.ctx, n, o)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(e.ctx)
		var id clientv3.LeaseID
		l.As(&id)
		ids, ls = append(ids, id), append(ls, l)
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("leases of one TTL on etcd leases %x, want one", ids)
	}
	if _, err := e.raw.Revoke(e.ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		select {
		case <-l.Done():
		case <-time.After(3 * time.Second):
			t.Fatalf("lease %d not lost 3s after its class lease was revoked", i)
		}
		if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
			t.Fatalf("lease %d: Err %v", i, l.Err())
		}
	}
	l, err := c.TryAcquire(e.ctx, "a", o)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(e.ctx)
	var id clientv3.LeaseID
	if l.As(&id); id == ids[0] {
		t.Fatalf("acquisition after the class lease was revoked on the revoked lease %x", id)
	}
}

// TestUnrenewedLockEndsDespiteSibling: a lock that is not renewed ends in
// the store after its TTL even though another lock of its class keeps the
// shared etcd lease alive: another client gets it, the sibling stays held.
func TestUnrenewedLockEndsDespiteSibling(t *testing.T) {
	e := newInteropEnv(t)
	c, other := e.client(), e.client()
	const ttl = time.Second
	quiet, err := c.TryAcquire(e.ctx, "quiet", &fencelock.AcquireOptions{TTL: ttl, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	sib, err := c.TryAcquire(e.ctx, "renewed", &fencelock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer sib.Release(e.ctx)
	l, err := other.Acquire(e.ctx, "quiet", &fencelock.AcquireOptions{TTL: 30 * time.Second, Wait: 5 * ttl})
	if err != nil {
		t.Fatalf("another client's Acquire of the unrenewed lock: %v", err)
	}
	defer l.Release(e.ctx)
	if l.Fence() <= quiet.Fence() {
		t.Fatalf("fence %d not above the unrenewed holder's %d", l.Fence(), quiet.Fence())
	}
	if !errors.Is(quiet.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("unrenewed holder's Err = %v, want ErrLeaseLost", quiet.Err())
	}
	if err := sib.Err(); err != nil {
		t.Fatalf("the renewed sibling ended: %v", err)
	}
}

// backendOf is the etcd driver under c.
func backendOf(t testing.TB, c *fencelock.Client) *backend {
	t.Helper()
	a, ok := adminhook.Of(c)
	if !ok {
		t.Fatal("not an etcd client")
	}
	return a.(*backend)
}

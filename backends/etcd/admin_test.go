package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestAdminExpire: Expire, through another client, deletes the holder's
// key: the holder reports the loss, the next contender gets the lock with
// a higher fence; the holder's etcd lease (its TTL class's) is not
// revoked, so its other lock of that TTL stays held; Expire of a free lock
// is a no-op.
func TestAdminExpire(t *testing.T) {
	srv := sharedEtcd(t, 1)
	a, b := openURL(t, srv.URL("admin")), openURL(t, srv.URL("admin"))
	ctx := t.Context()
	n := t.Name()
	o := &fencelock.AcquireOptions{TTL: 30 * time.Second}
	l, err := a.TryAcquire(ctx, n, o)
	if err != nil {
		t.Fatal(err)
	}
	sib, err := a.TryAcquire(ctx, n+"-sibling", o)
	if err != nil {
		t.Fatal(err)
	}
	defer sib.Release(ctx)
	var id, sibID clientv3.LeaseID
	if !l.As(&id) || id == 0 || !sib.As(&sibID) {
		t.Fatal("Lease.As(*clientv3.LeaseID) = false")
	}
	if id != sibID {
		t.Fatalf("two locks of one TTL on leases %x and %x, want one class lease", id, sibID)
	}
	if err := testhelp.Admin(t, b).Expire(ctx, n); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("lease not reported lost 3s after Expire")
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err after Expire: %v", l.Err())
	}
	var cli *clientv3.Client
	b.As(&cli)
	if ttl, err := cli.TimeToLive(ctx, id); err != nil || ttl.TTL <= 0 {
		t.Fatalf("the holder's class lease after Expire: TTL %v (%v), want alive", ttl, err)
	}
	if err := sib.Extend(ctx, 0); err != nil || sib.Err() != nil {
		t.Fatalf("the holder's other lock after Expire: Extend %v, Err %v", err, sib.Err())
	}
	l2, err := b.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d not above %d", l2.Fence(), l.Fence())
	}
	_ = l2.Release(ctx)
	if err := testhelp.Admin(t, b).Expire(ctx, n); err != nil {
		t.Fatalf("Expire of a free lock: %v", err)
	}
}

// TestAdminKillSessions: KillSessions revokes exactly this client's
// leases: its held lease is lost, its waiter queues again (and is not
// granted a lock another client holds), another client's lease stays.
func TestAdminKillSessions(t *testing.T) {
	srv := sharedEtcd(t, 1)
	a, b := openURL(t, srv.URL("admin")), openURL(t, srv.URL("admin"))
	ctx := t.Context()
	n := t.Name()
	o := &fencelock.AcquireOptions{TTL: 30 * time.Second}
	la, err := a.TryAcquire(ctx, n+"-a", o)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, n+"-b", o)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(context.Background())
	wctx, cancel := context.WithCancel(ctx)
	waitErr := make(chan error, 1)
	go func() { _, err := a.Acquire(wctx, n+"-b", o); waitErr <- err }()
	defer func() { cancel(); <-waitErr }()
	var cli *clientv3.Client
	b.As(&cli)
	pfx := LockPrefix("admin/", n+"-b") + "/"
	testhelp.Eventually(t, 5*time.Second, func() error {
		resp, err := cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 2 {
			return fmt.Errorf("%d keys under %s, want holder + a's waiter", resp.Count, pfx)
		}
		return nil
	})
	if err := testhelp.Admin(t, a).KillSessions(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("a's lease not reported lost 3s after KillSessions")
	}
	if !errors.Is(la.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err after KillSessions: %v", la.Err())
	}
	if lb.Err() != nil {
		t.Fatalf("b's lease ended by a's KillSessions: %v", lb.Err())
	}
	select {
	case err := <-waitErr:
		t.Fatalf("a's waiter returned %v while b holds the lock", err)
	case <-time.After(300 * time.Millisecond):
	}
	l2, err := a.TryAcquire(ctx, n+"-a", nil)
	if err != nil {
		t.Fatalf("TryAcquire after KillSessions: %v", err)
	}
	_ = l2.Release(ctx)
}

// TestStockEtcdMinTTL: against a stock etcd (default timing), Open probes
// the minimum TTL: Capabilities().MinTTL is 2 s, a shorter ttl in the URL
// and a shorter TTL at Acquire are rejected, and a lease reports the TTL
// etcd granted.
func TestStockEtcdMinTTL(t *testing.T) {
	e := testserver.StartStockEtcd(t)
	c := openURL(t, e.URL("stock"))
	if got := c.Capabilities().MinTTL; got != 2*time.Second {
		t.Fatalf("MinTTL on a stock etcd = %v, want 2s", got)
	}
	_, err := c.TryAcquire(t.Context(), "x", &fencelock.AcquireOptions{TTL: time.Second})
	if !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("TTL 1s on a stock etcd: %v, want ErrInvalid", err)
	}
	l, err := c.TryAcquire(t.Context(), "x", &fencelock.AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	if got := l.StoreTTL(); got != 2*time.Second {
		t.Fatalf("StoreTTL = %v, want 2s", got)
	}
	// On the tuned embedded server (election timeout 600 ms) it is 1 s.
	tuned := openURL(t, sharedEtcd(t, 1).URL("tuned"))
	if got := tuned.Capabilities().MinTTL; got != time.Second {
		t.Fatalf("MinTTL on the tuned etcd = %v, want 1s", got)
	}
}

// TestGrantedTTLReported: the driver lease reports the TTL etcd granted,
// from the Grant and from every KeepAlive, even when it exceeds the
// requested one (a backend configured with a MinTTL below the server's).
func TestGrantedTTLReported(t *testing.T) {
	e := testserver.StartStockEtcd(t)
	cli := newClientv3(t, e.Endpoint)
	c := mustNew(t, cli, &Config{MinTTL: time.Second}, nil) // deliberately below the server's 2 s
	defer c.Close()
	l, err := c.TryAcquire(t.Context(), "granted", &fencelock.AcquireOptions{TTL: time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	if got := l.StoreTTL(); got != 2*time.Second {
		t.Fatalf("StoreTTL after grant = %v, want 2s (granted)", got)
	}
	if err := l.Extend(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if got := l.StoreTTL(); got != 2*time.Second {
		t.Fatalf("StoreTTL after renewal = %v, want 2s (granted)", got)
	}
}

// TestConformanceStockEtcdByURL runs the whole suite by URL, as
// `fencelock conformance --url` does, against Debian's etcd 3.4 with
// etcd's default timing (2 s minimum lease TTL): nothing may be skipped.
func TestConformanceStockEtcdByURL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	e := testserver.StartStockEtcd(t)
	conformance.RunConformanceTests(t, conformance.URLHarness(e.URL("conformance")))
}

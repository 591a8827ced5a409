package etcd

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
)

// lockKey returns the only key queued under name's lock prefix.
func (e *interopEnv) lockKey(name string) *clientv3.GetResponse {
	e.t.Helper()
	resp, err := e.raw.Get(e.ctx, LockPrefix(e.keyPrefix, name)+"/", clientv3.WithPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// TestWaiterWhoseKeyVanishedRequeues is the Jepsen etcd 3.4.3 case: a
// waiter's key is deleted while it waits (its lease expired, an operator
// deleted it) and another contender queues meanwhile. When the holder
// releases, the waiter must not count itself the holder: the later
// contender is now first. The waiter queues again and gets the lock only
// after that contender releases.
func TestWaiterWhoseKeyVanishedRequeues(t *testing.T) {
	e := newInteropEnv(t)
	h, w, x := e.client(), e.client(), e.client()
	name := "jepsen"
	lh, err := h.TryAcquire(e.ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	wGot := make(chan grant, 1)
	go func() {
		l, err := w.Acquire(e.ctx, name, &fencelock.AcquireOptions{Wait: 30 * time.Second})
		wGot <- grant{l, err}
	}()
	e.waitKeys(name, 2)
	keys := e.lockKey(name).Kvs
	var wKey []byte
	for _, kv := range keys {
		if kv.CreateRevision != lh.Fence().Int64() {
			wKey = kv.Key
		}
	}
	if _, err := e.raw.Delete(e.ctx, string(wKey)); err != nil { // the waiter's key vanishes
		t.Fatal(err)
	}
	xGot := make(chan grant, 1)
	go func() {
		l, err := x.Acquire(e.ctx, name, &fencelock.AcquireOptions{Wait: 30 * time.Second})
		xGot <- grant{l, err}
	}()
	e.waitKeys(name, 2) // holder and x
	if err := lh.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	gx := <-xGot // x is first now
	if gx.err != nil {
		t.Fatal(gx.err)
	}
	// Either the waiter queues again behind x (2 keys), or it wrongly
	// counts itself the holder.
	for deadline := time.Now().Add(10 * time.Second); e.lockKey(name).Count < 2; {
		select {
		case g := <-wGot:
			t.Fatalf("waiter whose key vanished was granted (fence %v, err %v) while x holds the lock: two holders", g.l.Fence(), g.err)
		case <-time.After(5 * time.Millisecond): // polling the store for a state, not a sync
		}
		if time.Now().After(deadline) {
			t.Fatal("waiter neither queued again nor returned")
		}
	}
	select {
	case g := <-wGot:
		t.Fatalf("waiter granted (fence %v, err %v) while x holds the lock", g.l.Fence(), g.err)
	default:
	}
	if err := gx.l.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	gw := <-wGot
	if gw.err != nil {
		t.Fatal(gw.err)
	}
	defer gw.l.Release(e.ctx)
	if gw.l.Fence() <= gx.l.Fence() {
		t.Fatalf("requeued waiter's fence %d not above x's %d", gw.l.Fence(), gx.l.Fence())
	}
}

// TestExtendMovesToNewLease: etcd cannot change a lease's TTL, so Extend
// with another TTL moves the key to the lease of that TTL's class; the
// key, its CreateRevision (the fence) and its place are unchanged. Class
// leases are shared: the old one keeps carrying the client's other lock of
// that TTL, and moving back lands on it again.
func TestExtendMovesToNewLease(t *testing.T) {
	e := newInteropEnv(t)
	c := e.client()
	o := &fencelock.AcquireOptions{TTL: 2 * time.Second, AutoRenew: fencelock.Bool(false)}
	l, err := c.TryAcquire(e.ctx, "x", o)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(e.ctx)
	sib, err := c.TryAcquire(e.ctx, "y", &fencelock.AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sib.Release(e.ctx)
	before := e.lockKey("x").Kvs[0]
	if sibKey := e.lockKey("y").Kvs[0]; sibKey.Lease != before.Lease {
		t.Fatalf("two locks of one TTL on leases %x and %x, want one class lease", before.Lease, sibKey.Lease)
	}
	class2s := before.Lease
	for _, ttl := range []time.Duration{30 * time.Second, 1500 * time.Millisecond} {
		if err := l.Extend(e.ctx, ttl); err != nil {
			t.Fatalf("Extend(%v): %v", ttl, err)
		}
		kvs := e.lockKey("x").Kvs
		if len(kvs) != 1 || string(kvs[0].Key) != string(before.Key) || kvs[0].CreateRevision != before.CreateRevision {
			t.Fatalf("after Extend(%v): keys %v, want %s at revision %d", ttl, kvs, before.Key, before.CreateRevision)
		}
		ttlResp, err := e.raw.TimeToLive(e.ctx, clientv3.LeaseID(kvs[0].Lease))
		if err != nil {
			t.Fatal(err)
		}
		if want := ttlSeconds(ttl); ttlResp.GrantedTTL != want {
			t.Errorf("after Extend(%v): lease TTL %ds, want %d", ttl, ttlResp.GrantedTTL, want)
		}
		if ttl == 1500*time.Millisecond && kvs[0].Lease != class2s {
			t.Errorf("after Extend(%v): key on lease %x, want the 2 s class lease %x", ttl, kvs[0].Lease, class2s)
		}
		if sibKey := e.lockKey("y").Kvs; len(sibKey) != 1 || sibKey[0].Lease != class2s || sib.Err() != nil {
			t.Fatalf("after Extend(%v): the other 2 s lock: keys %v, Err %v; want it held on lease %x", ttl, sibKey, sib.Err(), class2s)
		}
		before = kvs[0]
	}
	if l.Fence().Int64() != before.CreateRevision {
		t.Fatalf("fence %d, key revision %d", l.Fence(), before.CreateRevision)
	}
}

// TestLeaseReuse: the TTL class lease outlives a release and serves the
// next acquisition with the same TTL; Close revokes it.
func TestLeaseReuse(t *testing.T) {
	e := newInteropEnv(t)
	c, err := fencelock.Open(e.ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	l1, err := c.TryAcquire(e.ctx, "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	first := e.lockKey("r").Kvs[0]
	if err := l1.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.lockKey("r").Count; n != 0 {
		t.Fatalf("%d keys left after Release", n)
	}
	l2, err := c.TryAcquire(e.ctx, "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	second := e.lockKey("r").Kvs[0]
	if second.Lease != first.Lease {
		t.Errorf("second acquisition on lease %x, want the released %x reused", second.Lease, first.Lease)
	}
	if second.CreateRevision <= first.CreateRevision || l2.Fence() <= l1.Fence() {
		t.Errorf("second key revision %d (fence %d) not above the first %d (fence %d)", second.CreateRevision, l2.Fence(), first.CreateRevision, l1.Fence())
	}
	if err := l2.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ttl, err := e.raw.TimeToLive(e.ctx, clientv3.LeaseID(first.Lease))
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Fatalf("class lease %x alive after Close (TTL %d)", first.Lease, ttl.TTL)
	}
}

// TestStoreLossWhileShortHeld: a lease whose key is deleted right after the
// grant (as the shared loss watch is being started) still learns of it.
func TestStoreLossWhileShortHeld(t *testing.T) {
	e := newInteropEnv(t)
	c := e.client()
	l, err := c.TryAcquire(e.ctx, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.raw.Delete(e.ctx, string(e.lockKey("s").Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost 5s after its key was deleted")
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err = %v", l.Err())
	}
	if err := l.Release(e.ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Release after loss: %v", err)
	}
}

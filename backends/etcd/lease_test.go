package etcd

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testhelp"
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
// releases, the waiter must not count itself the holder on its deleted
// key. It queues again, as soon as the shared watch delivers the deletion
// (before or after x queued) or at the latest when the key ahead goes;
// whichever of x and the waiter is first then, the other gets the lock
// only after it is released, with a greater fence.
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
	e.waitKeys(name, 2) // the holder and x, or the waiter queued again
	if err := lh.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	var first grant
	var other chan grant
	select {
	case first = <-xGot:
		other = wGot
	case first = <-wGot:
		other = xGot
	}
	if first.err != nil {
		t.Fatal(first.err)
	}
	// The other one queues (2 keys) and is not granted while first holds.
	for deadline := time.Now().Add(10 * time.Second); e.lockKey(name).Count < 2; {
		select {
		case g := <-other:
			t.Fatalf("granted (fence %v, err %v) while fence %v holds the lock: two holders", g.l.Fence(), g.err, first.l.Fence())
		case <-time.After(5 * time.Millisecond): // polling the store for a state, not a sync
		}
		if time.Now().After(deadline) {
			t.Fatal("the other contender neither queued nor returned")
		}
	}
	select {
	case g := <-other:
		t.Fatalf("granted (fence %v, err %v) while fence %v holds the lock", g.l.Fence(), g.err, first.l.Fence())
	default:
	}
	if err := first.l.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	second := <-other
	if second.err != nil {
		t.Fatal(second.err)
	}
	defer second.l.Release(e.ctx)
	if second.l.Fence() <= first.l.Fence() {
		t.Fatalf("second holder's fence %d not above the first's %d", second.l.Fence(), first.l.Fence())
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

// TestWaiterKeyDeletedWithPredecessor: the waiter's key and the holder's
// are deleted by one Txn (one revision), so the shared watch delivers
// both deletions together. The deletion of the key ahead must not pass the
// turn to the waiter on its deleted key: it queues again, and holds under
// its new key, created after that revision.
func TestWaiterKeyDeletedWithPredecessor(t *testing.T) {
	e := newInteropEnv(t)
	h, w := e.client(), e.client()
	name := "together"
	lh, err := h.TryAcquire(e.ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Release(e.ctx)
	wGot := make(chan grant, 1)
	go func() {
		l, err := w.Acquire(e.ctx, name, &fencelock.AcquireOptions{Wait: 30 * time.Second})
		wGot <- grant{l, err}
	}()
	e.waitKeys(name, 2)
	var ops []clientv3.Op
	for _, kv := range e.lockKey(name).Kvs {
		ops = append(ops, clientv3.OpDelete(string(kv.Key)))
	}
	resp, err := e.raw.Txn(e.ctx).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	g := <-wGot
	if g.err != nil {
		t.Fatal(g.err)
	}
	defer g.l.Release(e.ctx)
	if g.l.Fence().Int64() <= resp.Header.Revision {
		t.Fatalf("waiter holds with fence %d, not above revision %d that deleted its key: it took the turn on its deleted key", g.l.Fence(), resp.Header.Revision)
	}
	kvs := e.lockKey(name).Kvs
	if len(kvs) != 1 || kvs[0].CreateRevision != g.l.Fence().Int64() {
		t.Fatalf("keys %v, want only the waiter's new key (revision %d)", kvs, g.l.Fence())
	}
}

// TestHandoffSendsNoRequest: when the key ahead of a waiter was the only
// one ahead, its deletion (delivered by the shared watch) passes the turn
// with no request from the waiter: the waiter's client sends no Txn
// between queueing and holding.
func TestHandoffSendsNoRequest(t *testing.T) {
	cli, rc := countedClient(t, -1)
	srv := sharedEtcd(t, 1) // the same server
	kp := fmt.Sprintf("handoff-%d/", time.Now().UnixNano())
	w := mustNew(t, cli, &Config{KeyPrefix: kp}, nil)
	defer w.Close()
	h := mustNew(t, newClientv3(t, srv.Endpoints()...), &Config{KeyPrefix: kp}, nil)
	defer h.Close()
	o := &fencelock.AcquireOptions{TTL: 30 * time.Second}
	for i := range 3 {
		lh, err := h.Acquire(t.Context(), "x", o)
		if err != nil {
			t.Fatal(err)
		}
		wGot := make(chan grant, 1)
		go func() {
			l, err := w.Acquire(t.Context(), "x", o)
			wGot <- grant{l, err}
		}()
		raw := newClientv3(t, srv.Endpoints()...)
		for {
			resp, err := raw.Get(t.Context(), LockPrefix(kp, "x")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Count == 2 {
				break
			}
			time.Sleep(5 * time.Millisecond) // polling the store for a state, not a sync
		}
		txn0 := rc.txn.Load()
		if err := lh.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		g := <-wGot
		if g.err != nil {
			t.Fatal(g.err)
		}
		if n := rc.txn.Load() - txn0; n != 0 && i > 0 {
			// The first wait may start the shared watch after the queue
			// was read, and read it again.
			t.Errorf("hand-off %d: the waiter sent %d Txns after it queued, want 0", i, n)
		}
		if err := g.l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWatchResumesAfterCompaction: a shared watch that resumes from a
// revision etcd has compacted gets the compaction answer, reads the held
// keys and watches on from the current revision, and still reports the
// deletion of a held key.
func TestWatchResumesAfterCompaction(t *testing.T) {
	e := newInteropEnv(t)
	c := e.client()
	b := backendOf(t, c)
	for i := range 3 {
		if _, err := e.raw.Put(e.ctx, e.keyPrefix+"filler", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := e.raw.Delete(e.ctx, e.keyPrefix+"filler")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.raw.Compact(e.ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	// A watch that must resume at revision 2, long compacted.
	b.mu.Lock()
	b.startLocked(1)
	b.mu.Unlock()
	testhelp.Eventually(t, 10*time.Second, func() error {
		b.mu.Lock()
		from := b.watch.from
		b.mu.Unlock()
		if from > resp.Header.Revision {
			return nil
		}
		return fmt.Errorf("watch still covering from revision %d after the compaction at %d", from, resp.Header.Revision)
	})
	l, err := c.TryAcquire(e.ctx, "compacted", &fencelock.AcquireOptions{AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.raw.Delete(e.ctx, string(e.lockKey("compacted").Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("deletion of the key not reported after the watch resumed past the compaction")
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
}

// watchStarted reports whether c's shared watch runs.
func watchStarted(t *testing.T, c *fencelock.Client) bool {
	t.Helper()
	b := backendOf(t, c)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.watch.started
}

// waitWatchStopped waits until c's shared watch stopped (idle for
// watchLinger).
func waitWatchStopped(t *testing.T, c *fencelock.Client) {
	t.Helper()
	testhelp.Eventually(t, 10*time.Second, func() error {
		if watchStarted(t, c) {
			return errors.New("shared watch still running after the Client held and waited for nothing")
		}
		return nil
	})
}

// TestIdleWatchStopsAndRestarts: a Client that holds and waits for
// nothing drops its shared watch after watchLinger (an idle Client costs
// the cluster no watch); the next held lease or waiter starts a new one,
// which still reports a held key's deletion as a loss and a released
// key ahead as a waiter's turn.
func TestIdleWatchStopsAndRestarts(t *testing.T) {
	e := newInteropEnv(t)
	a, w := e.client(), e.client()
	o := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	for _, c := range []*fencelock.Client{a, w} {
		l, err := c.TryAcquire(e.ctx, "warm", o)
		if err != nil {
			t.Fatal(err)
		}
		// The watch starts once the lease has been held for
		// heldWatchDelay.
		testhelp.Eventually(t, 10*time.Second, func() error {
			if !watchStarted(t, c) {
				return errors.New("holding a lease did not start the shared watch")
			}
			return nil
		})
		if err := l.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
		waitWatchStopped(t, c)
	}

	// Loss of a held key, deleted before the watch restarted for it (at
	// most heldWatchDelay after the grant, from the grant's revision).
	l, err := a.TryAcquire(e.ctx, "lost", o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.raw.Delete(e.ctx, string(e.lockKey("lost").Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("deletion of a held key not reported after the watch restarted")
	}
	if err := l.Release(e.ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Release after loss: %v, want ErrLeaseLost", err)
	}
	waitWatchStopped(t, a)
	waitWatchStopped(t, w)

	// A hand-off to a waiter whose Client's watch had stopped.
	h, err := a.TryAcquire(e.ctx, "handoff", o)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var wl *fencelock.Lease
	go func() {
		var err error
		wl, err = w.Acquire(e.ctx, "handoff", o)
		got <- err
	}()
	e.waitKeys("handoff", 2)
	if err := h.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not granted 10s after the holder released")
	}
	if wl.Fence() <= h.Fence() {
		t.Errorf("waiter's fence %d not above the holder's %d", wl.Fence(), h.Fence())
	}
	if err := wl.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseReportsDeletedKey: Release (a plain delete of our key)
// reports ErrLeaseLost when the key was deleted under it, even before
// the shared watch delivered that deletion, and deletes nothing else: a
// contender queued since keeps its key.
func TestReleaseReportsDeletedKey(t *testing.T) {
	e := newInteropEnv(t)
	c, other := e.client(), e.client()
	o := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	l, err := c.TryAcquire(e.ctx, "gone", o)
	if err != nil {
		t.Fatal(err)
	}
	b := backendOf(t, c)
	var g Guard
	if !l.As(&g) {
		t.Fatal("Lease.As(*Guard) = false")
	}
	// Delete our key and hold the lock from another Client: stop the
	// watch's report of it from reaching the lease first by removing the
	// lease from the watch's held keys.
	b.mu.Lock()
	held := b.keys[g.Key]
	delete(b.keys, g.Key)
	b.mu.Unlock()
	if held == nil {
		t.Fatal("lease not registered with the watch")
	}
	if _, err := e.raw.Delete(e.ctx, g.Key); err != nil {
		t.Fatal(err)
	}
	ol, err := other.TryAcquire(e.ctx, "gone", o)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(e.ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Release of a deleted key: %v, want ErrLeaseLost", err)
	}
	resp := e.lockKey("gone")
	if len(resp.Kvs) != 1 || int64(ol.Fence()) != resp.Kvs[0].CreateRevision {
		t.Fatalf("after the lost lease's Release the queue is %v, want the other holder's key (fence %d)", resp.Kvs, ol.Fence())
	}
	if err := ol.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestQueuedHandoffSendsNoRequest: a waiter with several keys ahead of
// it (at most aheadMax) follows all of them; when the one just ahead is
// deleted after the others, the turn passes with no request from the
// waiter, and FIFO order and growing fences hold.
func TestQueuedHandoffSendsNoRequest(t *testing.T) {
	cli, rc := countedClient(t, -1)
	srv := sharedEtcd(t, 1)
	kp := fmt.Sprintf("qhandoff-%d/", time.Now().UnixNano())
	w := mustNew(t, cli, &Config{KeyPrefix: kp}, nil)
	defer w.Close()
	o := &fencelock.AcquireOptions{TTL: 30 * time.Second}
	const ahead = 3
	others := make([]*fencelock.Client, ahead)
	for i := range others {
		others[i] = mustNew(t, newClientv3(t, srv.Endpoints()...), &Config{KeyPrefix: kp}, nil)
		defer others[i].Close()
	}
	raw := newClientv3(t, srv.Endpoints()...)
	waitCount := func(n int64) {
		t.Helper()
		for {
			resp, err := raw.Get(t.Context(), LockPrefix(kp, "x")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Count == n {
				return
			}
			time.Sleep(5 * time.Millisecond) // polling the store for a state, not a sync
		}
	}
	for round := range 3 {
		first, err := others[0].Acquire(t.Context(), "x", o)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]chan grant, ahead)
		for i := 1; i < ahead; i++ {
			got[i] = make(chan grant, 1)
			go func() {
				l, err := others[i].Acquire(t.Context(), "x", o)
				got[i] <- grant{l, err}
			}()
			waitCount(int64(i + 1))
		}
		wGot := make(chan grant, 1)
		go func() {
			l, err := w.Acquire(t.Context(), "x", o)
			wGot <- grant{l, err}
		}()
		waitCount(ahead + 1)
		txn0 := rc.txn.Load()
		held, fence := first, first.Fence()
		for i := 1; i <= ahead; i++ {
			if err := held.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			var g grant
			if i < ahead {
				g = <-got[i]
			} else {
				g = <-wGot
			}
			if g.err != nil {
				t.Fatal(g.err)
			}
			if g.l.Fence() <= fence {
				t.Fatalf("round %d: grant %d has fence %d, not above the previous %d", round, i, g.l.Fence(), fence)
			}
			held, fence = g.l, g.l.Fence()
		}
		if n := rc.txn.Load() - txn0; n != 0 && round > 0 {
			// The first wait may start the shared watch after the queue
			// was read, and read it again.
			t.Errorf("round %d: the waiter with %d keys ahead sent %d Txns after it queued, want 0", round, ahead, n)
		}
		if err := held.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLeaseRegisteredWhileWaiterWatchStarts: a watch started for a waiter
// begins at the revision current when etcd creates it, which may come
// after a held lease's key was read; a lease registered before it is
// established restarts it from just after its own read, so no deletion
// of its key can fall between the two.
func TestLeaseRegisteredWhileWaiterWatchStarts(t *testing.T) {
	e := newInteropEnv(t)
	c := e.client()
	b := backendOf(t, c)
	resp, err := e.raw.Put(e.ctx, e.keyPrefix+"filler", "")
	if err != nil {
		t.Fatal(err)
	}
	hdr := resp.Header.Revision
	l := &lease{key: e.keyPrefix + "fake/1_1", rev: hdr}
	b.mu.Lock()
	b.startNowLocked()
	// b.mu is held: the watch cannot have been established.
	check, lost := b.registerLocked(l, hdr)
	from, next := b.watch.from, b.watch.next
	delete(b.keys, l.key)
	b.mu.Unlock()
	if check || lost {
		t.Errorf("registerLocked = check %v, lost %v; want false, false (the watch restarted from the lease's read)", check, lost)
	}
	if from != hdr+1 || next != hdr+1 {
		t.Errorf("watch covers from %d (next %d), want %d: the revision after the lease's read", from, next, hdr+1)
	}
}

// TestIdleWatchStopHandsBackHeldLeases: a watch that stops while young
// leases are held (none held for heldWatchDelay, no waiter) hands them
// back to the deferral, from where it stopped: a deletion of a held key
// after the stop is still reported as a loss by the watch that restarts.
func TestIdleWatchStopHandsBackHeldLeases(t *testing.T) {
	e := newInteropEnv(t)
	c := e.client()
	b := backendOf(t, c)
	o := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	l, err := c.TryAcquire(e.ctx, "young", o)
	if err != nil {
		t.Fatal(err)
	}
	waitWatchLive(t, b)
	// The watch has not been needed for watchLinger, and the lease is
	// young: stopIdle stops the watch and defers the lease.
	b.mu.Lock()
	for _, hl := range b.keys {
		hl.registered = time.Now()
	}
	b.watch.needAt = time.Now().Add(-2 * watchLinger)
	b.mu.Unlock()
	b.stopIdle()
	b.mu.Lock()
	started, armed := b.watch.started, b.watch.heldArmed
	b.mu.Unlock()
	if started || !armed {
		t.Fatalf("after stopIdle with only young leases: watch started %v, deferral armed %v; want false, true", started, armed)
	}
	if _, err := e.raw.Delete(e.ctx, string(e.lockKey("young").Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("deletion of a held key after the idle watch stopped not reported")
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
}

package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
)

// interopEnv is one test's view of the shared single-member etcd: a raw
// client for etcd's own recipes and a URL for fencelock clients, under a
// key prefix of its own.
type interopEnv struct {
	t         *testing.T
	ctx       context.Context
	raw       *clientv3.Client
	url       string
	keyPrefix string
}

func newInteropEnv(t *testing.T) *interopEnv {
	c := sharedEtcd(t, 1)
	kp := fmt.Sprintf("interop-%d", time.Now().UnixNano())
	return &interopEnv{t: t, ctx: t.Context(), raw: newClientv3(t, c.Endpoints()...), url: c.URL(kp), keyPrefix: kp + "/"}
}

func (e *interopEnv) client() *fencelock.Client {
	c, err := fencelock.Open(e.ctx, e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *interopEnv) mutex(name string) (*concurrency.Mutex, *concurrency.Session) {
	s, err := concurrency.NewSession(e.raw, concurrency.WithTTL(10))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = s.Close() })
	return concurrency.NewMutex(s, LockPrefix(e.keyPrefix, name)), s
}

// waitKeys waits until n contenders' keys are queued under name's prefix:
// the store's own view that a waiter is waiting.
func (e *interopEnv) waitKeys(name string, n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	for {
		resp, err := e.raw.Get(ctx, LockPrefix(e.keyPrefix, name)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			e.t.Fatalf("waiting for %d queued keys: %v", n, err)
		}
		if resp.Count >= int64(n) {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling the store for a state, not a sync
	}
}

// TestInteropMutexBlocksUs: etcd's concurrency.Mutex holds the lock; our
// Acquire queues behind it and returns only after Unlock, with a fence
// above the Mutex's key revision.
func TestInteropMutexBlocksUs(t *testing.T) {
	e := newInteropEnv(t)
	name := "job"
	m, _ := e.mutex(name)
	if err := m.Lock(e.ctx); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	if _, err := c.TryAcquire(e.ctx, name, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while a Mutex holds the lock: %v, want ErrNotAcquired", err)
	}
	type res struct {
		l   *fencelock.Lease
		err error
	}
	got := make(chan res, 1)
	go func() {
		l, err := c.Acquire(e.ctx, name, &fencelock.AcquireOptions{Wait: 30 * time.Second})
		got <- res{l, err}
	}()
	e.waitKeys(name, 2) // our key is queued behind the Mutex's
	select {
	case r := <-got:
		t.Fatalf("Acquire returned while the Mutex held the lock: %v", r.err)
	default:
	}
	mutexRev := m.Header().Revision
	if err := m.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("Acquire after the Mutex unlocked: %v", r.err)
	}
	defer r.l.Release(e.ctx)
	if r.l.Fence().Int64() <= mutexRev {
		t.Fatalf("fence %d not above the Mutex key's revision %d", r.l.Fence(), mutexRev)
	}
}

// TestInteropWeBlockMutex: we hold the lock; the Mutex's TryLock fails and
// its Lock returns only after our Release.
func TestInteropWeBlockMutex(t *testing.T) {
	e := newInteropEnv(t)
	name := "job"
	c := e.client()
	l, err := c.TryAcquire(e.ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := e.mutex(name)
	if err := m.TryLock(e.ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("Mutex.TryLock while we hold the lock: %v, want ErrLocked", err)
	}
	got := make(chan error, 1)
	go func() { got <- m.Lock(e.ctx) }()
	e.waitKeys(name, 2)
	select {
	case err := <-got:
		t.Fatalf("Mutex.Lock returned while we held the lock: %v", err)
	default:
	}
	if err := l.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Mutex.Lock after our Release: %v", err)
	}
	if rev := m.Header().Revision; rev <= l.Fence().Int64() {
		t.Fatalf("Mutex got the lock at revision %d, not after our fence %d", rev, l.Fence())
	}
	_ = m.Unlock(e.ctx)
}

// TestKeyLayout: the key is <prefix><name>/<lease ID hex>_<number> with the
// lease's label as its value, attached to its lease, and the fence is its
// CreateRevision, as the package doc says.
func TestKeyLayout(t *testing.T) {
	e := newInteropEnv(t)
	c := e.client()
	l, err := c.TryAcquire(e.ctx, "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(e.ctx)
	resp, err := e.raw.Get(e.ctx, e.keyPrefix+"job/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("%d keys under %sjob/, want 1", len(resp.Kvs), e.keyPrefix)
	}
	kv := resp.Kvs[0]
	if want := fmt.Sprintf("%sjob/%x_", e.keyPrefix, kv.Lease); !strings.HasPrefix(string(kv.Key), want) || len(kv.Key) == len(want) || kv.Lease == 0 {
		t.Errorf("key %q (lease %x), want %q followed by a number", kv.Key, kv.Lease, want)
	}
	if string(kv.Value) != l.Label() || l.Label() != fencelock.DefaultLabel() {
		t.Errorf("value %q, want the lease's label %q (the default, %q)", kv.Value, l.Label(), fencelock.DefaultLabel())
	}
	if kv.CreateRevision != l.Fence().Int64() {
		t.Errorf("fence %d, key CreateRevision %d", l.Fence(), kv.CreateRevision)
	}
	ttl, err := e.raw.TimeToLive(e.ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 15 { // the default TTL, 15s
		t.Errorf("lease granted TTL %ds, want 15", ttl.GrantedTTL)
	}
}

// TestSlashPrefixNames: names that are '/'-prefixes of each other ("a" and
// "a/b") are independent locks, for us and for a Mutex on LockPrefix; a
// raw Mutex on unescaped prefixes shows the hazard the escaping removes.
func TestSlashPrefixNames(t *testing.T) {
	e := newInteropEnv(t)
	c1, c2 := e.client(), e.client()
	la, err := c1.TryAcquire(e.ctx, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := c2.TryAcquire(e.ctx, "a/b", nil)
	if err != nil {
		t.Fatalf(`TryAcquire "a/b" while "a" is held: %v`, err)
	}
	// etcd's Mutex on the escaped prefixes sees the same locks.
	ma, _ := e.mutex("a")
	if err := ma.TryLock(e.ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf(`Mutex on LockPrefix("a") while we hold "a": %v, want ErrLocked`, err)
	}
	if err := la.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := ma.TryLock(e.ctx); err != nil {
		t.Fatalf(`Mutex on LockPrefix("a") while only "a/b" is held: %v`, err)
	}
	_ = ma.Unlock(e.ctx)
	if err := lb.Release(e.ctx); err != nil {
		t.Fatal(err)
	}

	// Without escaping, a Mutex on "x" sees the contenders of "x/b".
	s1, err := concurrency.NewSession(e.raw)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := concurrency.NewSession(e.raw)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	sub := concurrency.NewMutex(s1, e.keyPrefix+"x/b")
	if err := sub.Lock(e.ctx); err != nil {
		t.Fatal(err)
	}
	defer sub.Unlock(e.ctx)
	if err := concurrency.NewMutex(s2, e.keyPrefix+"x").TryLock(e.ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("raw Mutex on unescaped x while x/b is held: %v; the hazard this package escapes names for is gone?", err)
	}
}

// TestGuarded: a guarded Txn commits while the lease holds its lock and is
// refused (guard.ErrStale, ErrLeaseLost) once the lock is gone.
func TestGuarded(t *testing.T) {
	e := newInteropEnv(t)
	c := e.client()
	l, err := c.TryAcquire(e.ctx, "g", &fencelock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	data := e.keyPrefix + "data"
	if _, err := Guarded(e.ctx, c, l, clientv3.OpPut(data, "1")); err != nil {
		t.Fatalf("guarded write while held: %v", err)
	}
	g, err := GuardOf(c, l)
	if err != nil {
		t.Fatal(err)
	}
	if g.Rev != l.Fence().Int64() {
		t.Fatalf("guard revision %d, fence %d", g.Rev, l.Fence())
	}
	// Someone deletes our lock key (an operator, an expiry): the guard
	// refuses at once, before the holder even notices.
	if _, err := e.raw.Delete(e.ctx, g.Key); err != nil {
		t.Fatal(err)
	}
	_, err = g.Txn(e.ctx, e.raw, clientv3.OpPut(data, "2"))
	if !errors.Is(err, guard.ErrStale) || !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("guarded write after the lock key vanished: %v, want ErrStale and ErrLeaseLost", err)
	}
	resp, err := e.raw.Get(e.ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if v := string(resp.Kvs[0].Value); v != "1" {
		t.Fatalf("data %q after the refused write, want 1", v)
	}
	select { // and the holder is told
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost 5s after its key was deleted")
	}
	if _, err := Guarded(e.ctx, c, l, clientv3.OpPut(data, "3")); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Guarded with a lost lease: %v", err)
	}
}

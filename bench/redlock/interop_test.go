package redlock

import (
	"errors"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/fencelock/fencelock"
)

// TestInteropRedsync: a redsync Mutex and a fencelock Redlock lock on the
// same name and the same five primaries exclude each other, both ways, with
// redsync itself; neither's release or extend touches the other's lock; and
// each side's blocking acquire gets the lock once the other releases.
func TestInteropRedsync(t *testing.T) {
	m := primaries(t, 5, nil)
	ctx := t.Context()
	fl := openFencelock(t, m)
	rs := newRedsync(t, m)
	const name = "interop:orders:42"
	mutex := func() *redsync.Mutex {
		return rs.NewMutex(name, redsync.WithExpiry(5*time.Second), redsync.WithTries(1))
	}

	// fencelock holds: redsync is refused, and cannot extend or unlock it.
	l, err := fl.TryAcquire(ctx, name, &fencelock.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mu := mutex()
	if err := mu.TryLockContext(ctx); err == nil {
		t.Fatal("redsync locked a name fencelock holds")
	} else {
		t.Logf("redsync while fencelock holds: %v", err)
	}
	if ok, _ := mu.ExtendContext(ctx); ok {
		t.Fatal("redsync extended fencelock's lock")
	}
	if ok, _ := mu.UnlockContext(ctx); ok {
		t.Fatal("redsync unlocked fencelock's lock")
	}
	if l.Err() != nil {
		t.Fatalf("fencelock lease ended by redsync's attempts: %v", l.Err())
	}
	// redsync blocks (polling) until fencelock releases.
	blocking := rs.NewMutex(name, redsync.WithExpiry(5*time.Second), redsync.WithTries(100), redsync.WithRetryDelay(20*time.Millisecond))
	got := make(chan error, 1)
	go func() { got <- blocking.LockContext(ctx) }()
	time.Sleep(100 * time.Millisecond) // let redsync poll a few times
	select {
	case err := <-got:
		t.Fatalf("redsync's blocking Lock returned %v while fencelock held the lock", err)
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("redsync Lock after fencelock released: %v", err)
	}

	// redsync holds: fencelock is refused, and its stale lease's Release
	// cannot delete redsync's lock.
	_, err = fl.TryAcquire(ctx, name, nil)
	if !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("fencelock TryAcquire while redsync holds: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second Release of the released lease: %v", err)
	}
	if ok, err := blocking.ExtendContext(ctx); !ok || err != nil {
		t.Fatalf("redsync Extend of its own lock: %v %v", ok, err)
	}
	// fencelock's blocking Acquire gets it once redsync unlocks (redsync
	// publishes nothing: fencelock's waiter finds out by polling).
	type res struct {
		l   *fencelock.Lease
		err error
		at  time.Time
	}
	fgot := make(chan res, 1)
	go func() {
		l2, err := fl.Acquire(ctx, name, &fencelock.AcquireOptions{Wait: 10 * time.Second})
		fgot <- res{l2, err, time.Now()}
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case r := <-fgot:
		t.Fatalf("fencelock Acquire returned (%v) while redsync held the lock", r.err)
	default:
	}
	unlocked := time.Now()
	if ok, err := blocking.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("redsync Unlock: %v %v", ok, err)
	}
	r := <-fgot
	if r.err != nil {
		t.Fatalf("fencelock Acquire after redsync unlocked: %v", r.err)
	}
	t.Logf("fencelock got the lock %v after redsync's Unlock (polling: redsync publishes nothing)", r.at.Sub(unlocked).Round(time.Millisecond))
	if r.l.Fence() <= l.Fence() {
		t.Fatalf("fence %d not above %d", r.l.Fence(), l.Fence())
	}
	if err := mutex().TryLockContext(ctx); err == nil {
		t.Fatal("redsync locked a name fencelock holds (second round)")
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	final := mutex()
	if err := final.TryLockContext(ctx); err != nil {
		t.Fatalf("redsync TryLock after fencelock released: %v", err)
	}
	if ok, err := final.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("redsync Unlock: %v %v", ok, err)
	}
}

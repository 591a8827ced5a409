package dynamodb_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTryAcquireUsesEarlierObservation: a TryAcquire that finds a lock
// held records its version; a later TryAcquire of the same Client takes
// the lock once that version has been unchanged for the lease, while a
// Client that never looked before must watch a full lease itself.
func TestTryAcquireUsesEarlierObservation(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	holder, watcher, late := open(t, d.URL(), nil), open(t, d.URL(), nil), open(t, d.URL(), nil)
	n := name(t)
	const ttl = 400 * time.Millisecond
	l, err := holder.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: ttl, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watcher.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("first TryAcquire: %v, want ErrNotAcquired", err)
	}
	watched := time.Now()
	// The holder has stopped renewing; its lease runs out. Wait past a
	// lease from the watcher's first read (a duration under test).
	time.Sleep(ttl + 50*time.Millisecond)
	if _, err := late.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire by a client that never watched the lock: %v, want ErrNotAcquired (it must watch a full lease first)", err)
	}
	l2, err := watcher.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatalf("TryAcquire %v after watching an unchanged version for its %v lease: %v", time.Since(watched), ttl, err)
	}
	defer l2.Release(ctx)
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d not above %d", l2.Fence(), l.Fence())
	}
	if !errors.Is(l.Release(ctx), fencelock.ErrLeaseLost) {
		t.Fatal("the expired holder's Release did not report ErrLeaseLost")
	}
}

// TestReleasedTakenAtNextPoll: a waiter blocked on a lock with a 30s
// lease takes it within one poll interval (plus round trips) of the
// release, not a lease later.
func TestReleasedTakenAtNextPoll(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	const poll = 50 * time.Millisecond
	a, b := open(t, d.URL(), nil), open(t, d.URL()+"&poll_interval=50ms", nil)
	n := name(t)
	for range 5 {
		l, err := a.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		var at time.Time
		go func() {
			l2, err := b.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: 30 * time.Second})
			at = time.Now()
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(3 * poll) // the waiter is polling by now; the release may come at any phase
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if took := at.Sub(released); took > poll+margin {
			t.Fatalf("released lock taken %v after the release, want within the %v poll interval (+%v margin)", took, poll, margin)
		}
	}
}

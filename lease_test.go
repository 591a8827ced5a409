package fencelock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counting wraps the mem:// driver to observe what the portable layer
// sends to the store.
type counting struct {
	driver.Backend
	extendsAfterRelease atomic.Int64
	extends             atomic.Int64
}

type countingLease struct {
	driver.Lease
	b        *counting
	released atomic.Bool
}

func (c *counting) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, err := c.Backend.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &countingLease{Lease: l, b: c}, nil
}

func (l *countingLease) Extend(ctx context.Context, ttl time.Duration) error {
	l.b.extends.Add(1)
	if l.released.Load() {
		l.b.extendsAfterRelease.Add(1)
	}
	time.Sleep(time.Millisecond) // widen the window for a racing Release
	return l.Lease.Extend(ctx, ttl)
}

func (l *countingLease) Release(ctx context.Context) error {
	l.released.Store(true)
	return l.Lease.Release(ctx)
}

func newCounting(t *testing.T) (*fencelock.Client, *counting) {
	c := &counting{Backend: memory.NewDriver(nil)}
	cl := fencelock.New(c, nil)
	t.Cleanup(func() { cl.Close() })
	return cl, c
}

func TestNoRenewalAfterRelease(t *testing.T) {
	ctx := context.Background()
	cl, c := newCounting(t)
	const ttl = 30 * time.Millisecond
	for range 50 {
		l, err := cl.TryAcquire(ctx, "x", &fencelock.AcquireOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl / 3) // release near a renewal, racing it
		// On a loaded machine the lease may run out before Release: that is
		// not what this test is about, renewals after Release are.
		if err := l.Release(ctx); err != nil && !errors.Is(err, fencelock.ErrLeaseLost) {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * ttl) // any stray renewal timer would fire in this window
	if n := c.extendsAfterRelease.Load(); n != 0 {
		t.Fatalf("%d renewals sent after Release", n)
	}
	if c.extends.Load() == 0 {
		t.Fatalf("no renewal observed at all: the test has no teeth")
	}
}

func TestLeaseEndsOnceUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	c := memClient(t, nil, nil)
	defer c.Close()
	l, err := c.TryAcquire(ctx, "x", &fencelock.AcquireOptions{TTL: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_ = l.Release(ctx)
			_ = l.Extend(ctx, 0)
		})
	}
	wg.Wait()
	<-l.Done()
	if l.Err() == nil {
		t.Fatal("ended lease has nil Err")
	}
}

// TestReleaseRacingExpiry: a Release that runs while the lease's local
// deadline ends it returns nil or ErrLeaseLost, never an error without a
// cause (it once read the cause before the ending lease had set it).
func TestReleaseRacingExpiry(t *testing.T) {
	c := memClient(t, memory.NewStore(), nil)
	defer c.Close()
	ctx := t.Context()
	for i := range 3000 {
		l, err := c.TryAcquire(ctx, "race", &fencelock.AcquireOptions{TTL: 2 * time.Millisecond, AutoRenew: fencelock.Bool(false)})
		if err != nil {
			t.Fatal(err)
		}
		for time.Until(l.ValidUntil()) > time.Duration(i%20)*10*time.Microsecond {
		}
		if err := l.Release(ctx); err != nil && !errors.Is(err, fencelock.ErrLeaseLost) {
			t.Fatalf("round %d: Release racing the deadline: %q, want nil or ErrLeaseLost", i, err)
		}
	}
}

// memClient returns a mem:// Client on s (a new Store if nil).
func memClient(tb testing.TB, s *memory.Store, opts *fencelock.Options) *fencelock.Client {
	tb.Helper()
	c, err := memory.New(s, nil, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

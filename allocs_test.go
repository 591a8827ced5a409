package fencelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/driver"
)

// nopBackend grants every attempt and allocates nothing itself, so that
// the allocations of a TryAcquire+Release through it are the portable
// layer's alone.
type nopBackend struct{ l nopLease }

type nopLease struct{ fence driver.Fence }

func (b *nopBackend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	b.l.fence++
	return &b.l, nil
}
func (b *nopBackend) Capabilities() driver.Capabilities {
	return driver.Capabilities{Backend: "nop", MinTTL: time.Millisecond}
}
func (b *nopBackend) Close() error                                      { return nil }
func (l *nopLease) Fence() driver.Fence                                 { return l.fence }
func (l *nopLease) Extend(ctx context.Context, ttl time.Duration) error { return nil }
func (l *nopLease) Release(ctx context.Context) error                   { return nil }

// Allocation budgets of one uncontended TryAcquire+Release (issue 27).
// They guard against regressions without timing: allocation counts are
// deterministic. Each is what the code allocates now, plus a margin of
// one; lower them when you cut, and raise them only with a reason.
//
// The portable layer's own allocations, measured through nopBackend:
//
//	AutoRenew off: the token (1), the Lease (1), the validity timer
//	  (2: the timer and its callback), the release context (5:
//	  context.WithoutCancel and context.WithTimeout's context, timer,
//	  timer callback and cancel func)
//	AutoRenew on: the renewal timer besides (2)
const (
	allocsPortableNoRenew = 9 + 1
	allocsPortableRenew   = 11 + 1
	// Through mem:// (the memory backend's own lease, loss context and
	// bookkeeping besides).
	allocsMemory = 21 + 1
)

func cycleAllocs(t *testing.T, c *fencelock.Client, opts *fencelock.AcquireOptions) float64 {
	t.Helper()
	ctx := t.Context()
	var err error
	a := testing.AllocsPerRun(200, func() {
		var l *fencelock.Lease
		if l, err = c.TryAcquire(ctx, "allocs", opts); err != nil {
			return
		}
		err = l.Release(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAllocsPerCycle(t *testing.T) {
	noRenew := &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)}
	renew := &fencelock.AcquireOptions{TTL: 30 * time.Second}
	nop := fencelock.New(&nopBackend{}, nil)
	defer nop.Close()
	mem, err := memory.New(memory.NewStore(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for _, tc := range []struct {
		name   string
		c      *fencelock.Client
		opts   *fencelock.AcquireOptions
		budget float64
	}{
		{"portable/AutoRenew-off", nop, noRenew, allocsPortableNoRenew},
		{"portable/AutoRenew-on", nop, renew, allocsPortableRenew},
		{"mem/AutoRenew-off", mem, noRenew, allocsMemory},
	} {
		a := cycleAllocs(t, tc.c, tc.opts)
		t.Logf("%s: %v allocations per TryAcquire+Release (budget %v)", tc.name, a, tc.budget)
		if a > tc.budget {
			t.Errorf("%s: %v allocations per TryAcquire+Release, over the budget of %v: see allocs_test.go", tc.name, a, tc.budget)
		}
	}
}

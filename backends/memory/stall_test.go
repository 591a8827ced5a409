package memory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/driver"
)

// stallable is the mem:// driver with a store that can be made slow to
// renew (the conformance RenewalStaller hook); everything else, optional
// interfaces included, is the real driver's.
type stallable struct {
	driver.Backend
	stall atomic.Int64 // extra Extend latency
}

func (b *stallable) Wait(ctx context.Context, name string) error {
	return b.Backend.(driver.Waiter).Wait(ctx, name)
}

func (b *stallable) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	return b.Backend.(driver.Inspector).Inspect(ctx, name)
}

func (b *stallable) As(target any) bool { return b.Backend.(driver.Aser).As(target) }

func (b *stallable) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, err := b.Backend.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &stallableLease{Lease: l, b: b}, nil
}

type stallableLease struct {
	driver.Lease
	b *stallable
}

func (l *stallableLease) Extend(ctx context.Context, ttl time.Duration) error {
	if d := time.Duration(l.b.stall.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return l.Lease.Extend(ctx, ttl)
}

func (l *stallableLease) SetLabel(ctx context.Context, label string) error {
	return l.Lease.(driver.Relabeler).SetLabel(ctx, label)
}

func (l *stallableLease) OnLost(f func()) (stop func() bool) {
	return l.Lease.(driver.LossNotifier).OnLost(f)
}

// stallers remembers each client's driver for StallExtends.
type stallers struct {
	mu sync.Mutex
	m  map[*fencelock.Client]*stallable
}

func (s *stallers) client(st *memory.Store, opts *fencelock.Options) *fencelock.Client {
	b := &stallable{Backend: memory.NewDriver(st)}
	c := fencelock.New(b, opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[*fencelock.Client]*stallable{}
	}
	s.m[c] = b
	return c
}

func (s *stallers) StallExtends(c *fencelock.Client, d time.Duration) (undo func()) {
	s.mu.Lock()
	b := s.m[c]
	s.mu.Unlock()
	b.stall.Store(int64(d))
	return func() { b.stall.Store(0) }
}

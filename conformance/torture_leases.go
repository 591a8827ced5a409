package conformance

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
)

// tortureLease is what a worker holds: a *fencelock.Lease, or a
// childLease (the Lease lives in a child process).
type tortureLease interface {
	Fence() fencelock.Fence
	ValidUntil() time.Time
	// Context ends when the holder's lease ends; Err then says why.
	Context() context.Context
	Err() error
	Extend(ctx context.Context, ttl time.Duration) error
	Release(ctx context.Context) error
}

// locker is what a worker acquires through: a Client in this process, or
// the child process's.
type locker interface {
	TryAcquire(ctx context.Context, name string, ao *fencelock.AcquireOptions) (tortureLease, error)
	Acquire(ctx context.Context, name string, ao *fencelock.AcquireOptions) (tortureLease, error)
}

// clientLocker is a Client in this process.
type clientLocker struct{ c *fencelock.Client }

func (c clientLocker) TryAcquire(ctx context.Context, name string, ao *fencelock.AcquireOptions) (tortureLease, error) {
	return asTortureLease(c.c.TryAcquire(ctx, name, ao))
}

func (c clientLocker) Acquire(ctx context.Context, name string, ao *fencelock.AcquireOptions) (tortureLease, error) {
	return asTortureLease(c.c.Acquire(ctx, name, ao))
}

// asTortureLease keeps a nil *Lease a nil interface.
func asTortureLease(l *fencelock.Lease, err error) (tortureLease, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

// leaseTable is the leases held now, per name, for the sample taken at
// each grant.
type leaseTable struct {
	mu     sync.Mutex
	byName map[string]map[int64]*liveLease
}

type liveLease struct {
	l         tortureLease
	releasing atomic.Bool // its holder called Release: it no longer believes it holds
}

func (t *leaseTable) add(name string, id int64, l tortureLease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.byName[name]
	if m == nil {
		m = map[int64]*liveLease{}
		t.byName[name] = m
	}
	m[id] = &liveLease{l: l}
}

func (t *leaseTable) remove(name string, id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byName[name], id)
}

func (t *leaseTable) releasing(name string, id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ll := t.byName[name][id]; ll != nil {
		ll.releasing.Store(true)
	}
}

// held returns the leases on name whose holders believe they hold it now.
func (t *leaseTable) held(name string) []int64 {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []int64
	for id, ll := range t.byName[name] {
		if !ll.releasing.Load() && ll.l.Err() == nil && now.Before(ll.l.ValidUntil()) {
			ids = append(ids, id)
		}
	}
	return ids
}

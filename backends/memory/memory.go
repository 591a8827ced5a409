package memory

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// capabilities are those of the mem:// backend.
var capabilities = driver.Capabilities{
	Backend:        "mem",
	Fence:          driver.FenceStrict,
	FenceSource:    "per-name counter in the process",
	MinTTL:         time.Millisecond,
	TTLGranularity: time.Nanosecond,
	TimeAuthority:  driver.TimeProcess,
	Wait:           driver.WaitNotify,
	FIFO:           false,
	NodeLoss:       driver.NodeLossNotApplicable,
	// The Store tells the holder's lease and the waiters at once, in
	// the process; the bounds are the Go scheduler's.
	LossSignal:  10 * time.Millisecond,
	ReleaseWake: 10 * time.Millisecond,
	ExpiryWake:  10 * time.Millisecond,
	Inspect: driver.InspectCaps{
		Supported: true, Label: true, Fence: true, Remaining: true, Relabel: true,
		LabelWhere: "the Store's entry for the lock",
	},
}

// Config configures the mem:// backend beyond fencelock.Options. It has no
// settings yet; nil is the default.
type Config struct{}

// New returns a Client on store s (a new empty Store if s is nil). cfg and
// opts may be nil. The error is always nil: New has the shape of every
// backend's New, so that code written against memory in tests takes
// another backend's client unchanged.
func New(s *Store, cfg *Config, opts *fencelock.Options) (*fencelock.Client, error) {
	if s == nil {
		s = NewStore()
	}
	return fencelock.New(newBackend(s), opts), nil
}

// NewDriver returns the mem:// driver on store s (a new Store if nil), for
// wrapping in a custom driver; most code wants New.
func NewDriver(s *Store) driver.Backend {
	if s == nil {
		s = NewStore()
	}
	return newBackend(s)
}

var lastSession atomic.Uint64

func newBackend(s *Store) *backend {
	return &backend{s: s, session: Session(lastSession.Add(1))}
}

type backend struct {
	s       *Store
	session Session
}

var (
	_ driver.Waiter = (*backend)(nil)
	_ driver.Aser   = (*backend)(nil)

	_ driver.LossNotifier = (*lease)(nil)
	_ driver.Relabeler    = (*lease)(nil)
	_ driver.Inspector    = (*backend)(nil)
)

func (b *backend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fence, lost, err := b.s.tryAcquire(b.session, req.Name, req.Token, req.Label, req.TTL)
	if err != nil {
		return nil, err
	}
	return &lease{s: b.s, name: req.Name, token: req.Token, fence: fence, lost: lost}, nil
}

// Inspect implements driver.Inspector.
func (b *backend) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	if err := ctx.Err(); err != nil {
		return driver.LockInfo{}, err
	}
	i := b.s.Inspect(name)
	return driver.LockInfo{Held: i.Held, Label: i.Label, Fence: i.Fence, Remaining: i.Remaining, Waiters: -1}, nil
}

func (b *backend) Wait(ctx context.Context, name string) error { return b.s.wait(ctx, name) }

func (b *backend) Capabilities() driver.Capabilities { return capabilities }

func (b *backend) Close() error { return nil }

// As supports **Store (the client's Store) and *Session (its session).
func (b *backend) As(target any) bool {
	switch p := target.(type) {
	case **Store:
		*p = b.s
	case *Session:
		*p = b.session
	default:
		return false
	}
	return true
}

type lease struct {
	s           *Store
	name, token string
	fence       driver.Fence
	lost        context.Context // cancelled when the store drops the lock
}

func (l *lease) Fence() driver.Fence { return l.fence }

func (l *lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.s.extend(l.name, l.token, ttl)
}

func (l *lease) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.s.release(l.name, l.token)
}

// SetLabel implements driver.Relabeler.
func (l *lease) SetLabel(ctx context.Context, label string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.s.setLabel(l.name, l.token, label)
}

// OnLost implements driver.LossNotifier without a goroutine per lease.
func (l *lease) OnLost(f func()) (stop func() bool) { return context.AfterFunc(l.lost, f) }

package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// ErrNoLeader is returned by Leader when nobody leads the election.
var ErrNoLeader = errors.New("election: no leader")

// Inspector is the part of *fencelock.Client that Leader and Observe use.
type Inspector interface {
	Inspect(ctx context.Context, name string) (fencelock.LockInfo, error)
}

// Options configures an Election. nil gives the defaults.
type Options struct {
	// TTL is the term's lease TTL: how long a leader that stopped
	// renewing (crashed, frozen, cut off) keeps others waiting.
	// Default: the Locker's default TTL.
	TTL time.Duration
	// MaxHold caps a term's length even while it renews; the leader then
	// steps down with ErrLeaseLost and may campaign again. Default: 0, no
	// cap.
	MaxHold time.Duration
	// AutoRenew renews the term's lease at TTL/3. Default: on.
	// fencelock.Bool(false) makes a leader that lasts one TTL, as a frozen
	// one does (the Example and the conformance checks use it).
	AutoRenew *bool
	// PollInterval is how often Observe (and Run's OnNewLeader) asks the
	// store who leads. Default: 100ms.
	PollInterval time.Duration
}

// Election is one election name on one store. Safe for concurrent use;
// any number of candidates and observers may share it.
type Election struct {
	l    fencelock.Locker
	name string
	o    Options

	mu   sync.Mutex
	seen Leader // the last leader Leader or Observe saw, for Since
}

// New returns the election called name over l (usually a
// *fencelock.Client, which is also an Inspector). name is a lock name.
func New(l fencelock.Locker, name string, opts *Options) (*Election, error) {
	if l == nil {
		return nil, fmt.Errorf("election: %w: nil Locker", fencelock.ErrInvalid)
	}
	if err := fencelock.ValidateName(name); err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	e := &Election{l: l, name: name}
	if opts != nil {
		e.o = *opts
	}
	switch {
	case e.o.TTL < 0, e.o.MaxHold < 0, e.o.PollInterval < 0:
		return nil, fmt.Errorf("election: %w: negative TTL, MaxHold or PollInterval", fencelock.ErrInvalid)
	}
	if e.o.PollInterval == 0 {
		e.o.PollInterval = 100 * time.Millisecond
	}
	return e, nil
}

// Name returns the election's name (its lock name).
func (e *Election) Name() string { return e.name }

// Campaign blocks until this candidate leads, ctx ends (an error for which
// errors.Is(err, ctx.Err()) holds; nothing is left held) or the store
// fails. value is the leader's published value ("" for
// fencelock.DefaultLabel()). The returned Term's Fence is greater than
// every earlier term's on this name.
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	l, err := e.l.Acquire(ctx, e.name, &fencelock.AcquireOptions{TTL: e.o.TTL, MaxHold: e.o.MaxHold, AutoRenew: e.o.AutoRenew, Label: value})
	if err != nil {
		return nil, err
	}
	return &Term{l: l}, nil
}

// Leader reports who leads now, as the store sees it: ErrNoLeader if
// nobody does, and an error wrapping errors.ErrUnsupported if the Locker
// cannot inspect locks or its backend keeps no labels.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	in, err := e.inspector()
	if err != nil {
		return Leader{}, err
	}
	info, err := in.Inspect(ctx, e.name)
	if err != nil {
		return Leader{}, err
	}
	if !info.Held {
		return Leader{}, fmt.Errorf("%w on %q", ErrNoLeader, e.name)
	}
	return e.leaderOf(info), nil
}

func (e *Election) inspector() (Inspector, error) {
	in, ok := e.l.(Inspector)
	if !ok {
		return nil, fmt.Errorf("election: %w: the Locker cannot inspect locks (use a *fencelock.Client)", errors.ErrUnsupported)
	}
	if c, ok := e.l.(interface {
		Capabilities() fencelock.Capabilities
	}); ok {
		if caps := c.Capabilities(); !caps.Inspect.Supported || !caps.Inspect.Label {
			return nil, fmt.Errorf("election: %w: the %s backend does not report lock labels (Capabilities.Inspect)", errors.ErrUnsupported, caps.Backend)
		}
	}
	return in, nil
}

// leaderOf turns a held lock's info into a Leader, keeping Since for a
// term seen before.
func (e *Election) leaderOf(info fencelock.LockInfo) Leader {
	e.mu.Lock()
	defer e.mu.Unlock()
	ld := Leader{Value: info.Label, Term: info.Fence, Since: info.At, ValidFor: info.Remaining}
	if e.seen.Term == info.Fence && info.Fence != 0 {
		ld.Since = e.seen.Since
	}
	e.seen = ld
	return ld
}

package election

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock"
)

// Term is one candidate's leadership: a fencelock lease on the election's
// name. Its methods are safe for concurrent use.
type Term struct {
	l *fencelock.Lease
}

// Fence is the term number: greater than every earlier term's on this
// election. Send it with every write the leader makes; a resource that
// checks it (package guard) refuses a deposed leader's writes.
func (t *Term) Fence() fencelock.Fence { return t.l.Fence() }

// Value is the leader's published value (the lease's label).
func (t *Term) Value() string { return t.l.Label() }

// Done is closed when leadership ends (Resign, loss, MaxHold).
func (t *Term) Done() <-chan struct{} { return t.l.Done() }

// Context is cancelled when leadership ends, with Err as its cause.
func (t *Term) Context() context.Context { return t.l.Context() }

// Err is nil while leading, then why leadership ended: ErrReleased after
// Resign, ErrLeaseLost otherwise (the term expired, the store dropped it,
// MaxHold passed).
func (t *Term) Err() error { return t.l.Err() }

// ValidUntil is the local deadline until which this candidate certainly
// leads (the lease's ValidUntil): no other term starts before it (but see
// Capabilities.BreakOverlap).
func (t *Term) ValidUntil() time.Time { return t.l.ValidUntil() }

// Lease is the term's lease, for what Term does not expose.
func (t *Term) Lease() *fencelock.Lease { return t.l }

// Proclaim publishes value as the leader's value and keeps leadership
// (same term). It returns ErrLeaseLost if leadership ended, and an error
// wrapping errors.ErrUnsupported if the backend cannot change a held
// lock's label in place.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	return t.l.SetLabel(ctx, value)
}

// Resign ends leadership and frees the election for the next candidate at
// once. It returns nil if the term was still held (or already resigned),
// and ErrLeaseLost if it had ended otherwise.
func (t *Term) Resign(ctx context.Context) error {
	err := t.l.Release(ctx)
	if err != nil && errors.Is(err, fencelock.ErrReleased) {
		return nil
	}
	return err
}

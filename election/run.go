package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// Config is what Run does with leadership. nil callbacks are skipped;
// OnStartedLeading is required.
type Config struct {
	// Value is the published value while leading ("" for
	// fencelock.DefaultLabel()).
	Value string
	// OnStartedLeading runs, in its own goroutine, when this candidate
	// starts leading. ctx ends when leadership ends (its cause says why);
	// do the leader's work under it, sending t.Fence() with every write.
	OnStartedLeading func(ctx context.Context, t *Term)
	// OnStoppedLeading runs once leadership has ended and
	// OnStartedLeading has returned, before Run returns. It is not called
	// if Run never led.
	OnStoppedLeading func()
	// OnNewLeader runs for each leader Observe reports while Run runs
	// (this candidate included), in order, in one goroutine.
	OnNewLeader func(Leader)
	// ReleaseOnCancel: when Run's ctx ends while leading, release the term
	// at once, so that the next candidate leads within the backend's
	// hand-off time (Capabilities.ReleaseWake). Default false: stop
	// renewing and let the term expire at its TTL, as client-go does.
	ReleaseOnCancel bool
}

// Run campaigns until this candidate leads, runs cfg.OnStartedLeading, and
// returns when leadership ends: with the cause (wrapping ErrLeaseLost) if
// it was lost, or with ctx's error when ctx ended (before leading, or
// while leading, then after stepping down as cfg.ReleaseOnCancel says).
// Call Run again to campaign again.
func (e *Election) Run(ctx context.Context, cfg Config) error {
	if cfg.OnStartedLeading == nil {
		return fmt.Errorf("election: %w: Config.OnStartedLeading is required", fencelock.ErrInvalid)
	}
	var bg sync.WaitGroup
	defer bg.Wait()
	octx, stopObserve := context.WithCancel(ctx)
	defer stopObserve()
	if cfg.OnNewLeader != nil {
		ch := e.Observe(octx)
		bg.Go(func() {
			for ld := range ch {
				cfg.OnNewLeader(ld)
			}
		})
	}
	t, err := e.Campaign(ctx, cfg.Value)
	if err != nil {
		return err
	}
	var work sync.WaitGroup
	work.Go(func() { cfg.OnStartedLeading(t.Context(), t) })
	select {
	case <-t.Done():
		err = t.Err()
	case <-ctx.Done():
		if cfg.ReleaseOnCancel {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = t.Resign(rctx)
			cancel()
		} else {
			t.Lease().Abandon()
		}
		err = ctx.Err()
	}
	work.Wait()
	if cfg.OnStoppedLeading != nil {
		cfg.OnStoppedLeading()
	}
	if errors.Is(err, fencelock.ErrReleased) {
		return nil // resigned from OnStartedLeading through t.Resign
	}
	return err
}

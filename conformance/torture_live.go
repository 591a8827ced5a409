package conformance

import (
	"context"
	"errors"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
)

// live is the liveness step: every worker takes the same fresh name,
// holds it briefly and releases it; each must be granted within
// LiveBound.
func (w *worker) live(ctx context.Context) {
	r := w.r
	octx, cancel := context.WithTimeout(ctx, r.liveBound()+r.margin)
	defer cancel()
	op := &Op{Worker: w.k, Client: w.client, Kind: OpAcquire, Name: "live", Invoke: r.hist.now(), Phase: "liveness"}
	l, err := w.c.Acquire(octx, "live", &fencelock.AcquireOptions{TTL: r.ttl, Wait: r.liveBound()})
	op.Complete = r.hist.now()
	if err != nil {
		op.Result, op.Err = classify(err), errText(err)
		r.hist.add(op)
		return
	}
	r.granted(op, l)
	pause(ctx, liveHold)
	w.release(ctx, "live", op.ID, l)
}

// classify names an operation's outcome.
func classify(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fencelock.ErrNotAcquired):
		return "refused"
	case errors.Is(err, fencelock.ErrLeaseLost), errors.Is(err, fencelock.ErrReleased):
		return "lost"
	case errors.Is(err, guard.ErrStale):
		return "stale"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "ctx"
	}
	return "error"
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

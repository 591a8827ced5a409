package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// recheck bounds how long a blocked Acquire trusts the subscription alone:
// after it, the waiter tries again even if no release was heard (a
// notification lost with a cluster bus link, a holder's TTL shortened).
const recheck = time.Second

// Acquire implements driver.Blocker: the first attempt costs what
// TryAcquire does. A refused waiter then queues behind this Client's
// earlier waiters on the name (internal/localq), sending nothing until it
// is first: a release is raced by one waiter per Client, not all of them,
// and a Client serves its waiters in arrival order. The first joins the
// client's shared
// subscription to the lock's release channel once (SUBSCRIBE, confirmed by
// a PING reply) and, from then on, retries only when a release is published,
// the holder's TTL runs out, or recheck passes — one round trip per retry,
// where a TryAcquire-then-Wait loop pays three (the attempt, a PING and a
// PTTL).
//
// No release can be missed: the hub counts the release messages heard on
// the channel; the count is read before each attempt is sent, and a
// release after the attempt was refused is published after it, so it
// raises the count (or, if the subscription connection broke, the hub's
// epoch) and the waiter retries at once.
//
// Every attempt uses req.Token: a refused attempt leaves nothing under it,
// and an attempt whose outcome is unknown ends the call with TryAcquire's
// error (after TryAcquire's own cleanup).
func (b *backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	sent := time.Now()
	l, err := b.TryAcquire(ctx, req)
	if !errors.Is(err, driver.ErrNotAcquired) {
		return l, sent, err
	}
	// Behind this Client's earlier waiters on the name, send nothing.
	t, ok := b.queue.Join(req.Name)
	if !ok {
		return nil, time.Time{}, driver.ErrClosed
	}
	defer b.queue.Leave(req.Name, t)
	select {
	case <-t.Turn():
	case <-ctx.Done():
		return nil, time.Time{}, fmt.Errorf("redis acquire: queued behind this Client's earlier waiters: %w", ctx.Err())
	case <-b.hub.closing:
		return nil, time.Time{}, driver.ErrClosed
	}
	k := keysFor(req.Name)
	w := &waiter{channel: k.channel, wake: make(chan struct{}, 1)}
	if err := b.hub.register(w); err != nil {
		return nil, time.Time{}, err
	}
	defer b.hub.leave(w)
	for {
		msgs, epoch, err := b.hub.mark(ctx, w)
		if err != nil {
			return nil, time.Time{}, err
		}
		sent = time.Now()
		l, err = b.TryAcquire(ctx, req)
		if !errors.Is(err, driver.ErrNotAcquired) {
			return l, sent, err
		}
		var r *refused
		next := recheck
		if errors.As(err, &r) {
			switch {
			case r.pttl >= 0:
				next = min(r.pttl, recheck)
			case r.pttl == -3*time.Millisecond: // this token was voided: nothing to wait for
				return nil, time.Time{}, err
			}
		}
		if err := b.hub.awaitRelease(ctx, w, msgs, epoch, next); err != nil {
			return nil, time.Time{}, err
		}
	}
}

// mark returns the release messages heard on w's channel and the
// connection epoch, once w's subscription is known to be in effect on the
// current connection (its PING was answered since the last break).
func (h *hub) mark(ctx context.Context, w *waiter) (msgs, epoch uint64, err error) {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return 0, 0, driver.ErrClosed
		}
		if w.epoch != h.epoch {
			h.pingLocked(w) // the connection broke since: confirm again
		}
		pong := w.pong
		select {
		case <-pong:
			msgs, epoch = h.msgs[w.channel], h.epoch
			h.mu.Unlock()
			return msgs, epoch, nil
		default:
		}
		h.mu.Unlock()
		select {
		case <-pong:
		case <-w.wake: // maybe a break: look again
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-h.closing:
			return 0, 0, driver.ErrClosed
		}
	}
}

// awaitRelease returns nil once a release was heard on w's channel since
// msgs was read, the subscription connection broke since epoch, or after
// d; ctx.Err() if ctx ends first.
func (h *hub) awaitRelease(ctx context.Context, w *waiter, msgs, epoch uint64, d time.Duration) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	for {
		h.mu.Lock()
		changed := h.msgs[w.channel] != msgs || h.epoch != epoch
		h.mu.Unlock()
		if changed {
			return nil
		}
		select {
		case <-w.wake:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-h.closing:
			return driver.ErrClosed
		}
	}
}

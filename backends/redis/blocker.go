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
// TryAcquire does (on a lock this Client waited on within the last
// second, whose subscription is still confirmed, the first attempt is
// already a queued one: a hot lock costs no refused attempt per wait).
// A refused waiter then queues behind this Client's
// earlier waiters on the name (internal/localq), sending nothing until it
// is first. The first joins the client's shared subscription to the lock's
// channel (SUBSCRIBE, confirmed by a PING reply), then takes a place in the
// lock's waiter queue on the server with its next attempt (see the package
// doc, Fair hand-off). From then on it sends nothing until its grant
// arrives: the release script that frees the lock hands it to the first
// live waiter in line, with its fence, and publishes the grant, so a
// hand-off costs the holder's release call and one message, no waiter
// round trip. The waiter sends an attempt again only to refresh its place
// (every refresh(TTL)), when the holder's TTL runs out (expiry publishes
// nothing), when a release notice is heard (a peer's, or one from a
// release that found only dead waiters in line), or when the subscription
// connection broke (a grant may have been lost: the attempt then finds the
// lock held under its own token and answers that grant).
//
// Every attempt uses req.Token. When the call ends without a grant (ctx
// ended, the backend closed, an error), it leaves the queue and releases a
// grant handed to it meanwhile (abandon.lua) before returning, so it leaves
// nothing held; an attempt whose outcome is unknown ends the call with
// TryAcquire's error (after TryAcquire's own cleanup).
func (b *backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	ka := b.keyArgs(req.Name)
	k := ka.k
	if !b.hub.subscribed(k.channel) && !b.lane.hot(k.channel) {
		// Not waited on lately: most likely free. If it is held, the
		// subscription costs a round trip anyway before we may queue.
		sent := time.Now()
		l, err := b.attemptArgs(ctx, ka, req, 0, "")
		if !errors.Is(err, driver.ErrNotAcquired) {
			return l, sent, err
		}
	}
	// Else this Client waited on it lately (a hot lock): skip straight to
	// the first queued attempt, which takes a free lock just as well.
	//
	// Behind this Client's earlier waiters on the name, send nothing.
	t, ok := b.queue.Join(req.Name, struct{}{})
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
	if b.lane.take() {
		stop := b.lane.closeOnEnd(ctx)
		l, sent, err, done := b.block(ctx, k, req, &laneWait{lane: b.lane, k: k, token: req.Token})
		stop()
		b.lane.put()
		if _, fallback := err.(errLane); !fallback {
			if err != nil && !done {
				// Leave the line, and release a grant handed to us meanwhile.
				return nil, time.Time{}, b.cleanup(ctx, k, req, err)
			}
			return l, sent, err
		}
		// The lane's connection could not be set up: wait through the hub
		// (its attempts, under the same token, answer a grant the lane
		// missed).
	}
	w := &waiter{channel: k.channel, lock: k.lock, token: req.Token, wake: make(chan struct{}, 1)}
	if err := b.hub.register(w); err != nil {
		return nil, time.Time{}, err
	}
	defer b.hub.leave(w)
	l, sent, err, done := b.block(ctx, k, req, &hubWait{hub: b.hub, w: w})
	if err != nil && !done {
		// Leave the line, and release a grant handed to us meanwhile.
		return nil, time.Time{}, b.cleanup(ctx, k, req, err)
	}
	return l, sent, err
}

// grants is how a queued waiter hears of its grant: the lane (lane.go) or
// the hub (waiter.go).
type grants interface {
	// ready returns once a grant published for the waiter would reach it
	// (its subscription is confirmed on the current connection), with the
	// fence of a grant heard already (0: none).
	ready(ctx context.Context) (driver.Fence, error)
	// forget drops a grant heard already (the waiter attempts again).
	forget()
	// await waits up to d for a grant (its fence), a release notice or a
	// broken connection (0: attempt again).
	await(ctx context.Context, d time.Duration) (driver.Fence, error)
	// id is the Client id the waiter queues under: grants are published on
	// <channel>:<id>.
	id() string
}

// block is Acquire's loop once the waiter can hear its grants through g.
// done reports an error from an attempt, which already cleaned up after
// itself (TryAcquire's contract).
func (b *backend) block(ctx context.Context, k keys, req driver.AcquireRequest, g grants) (_ driver.Lease, _ time.Time, _ error, done bool) {
	every := refresh(req.TTL)
	live := liveness(every)
	var queued time.Time   // when the last attempt that left us in line was sent
	var fence driver.Fence // a grant heard since
	for {
		f, err := g.ready(ctx)
		if err != nil {
			return nil, time.Time{}, err, false
		}
		if f != 0 {
			fence = f
		}
		if fence != 0 {
			// Handed to us by a release, after our last attempt ran
			// (that attempt was refused): the TTL started after queued.
			if !queued.IsZero() && time.Since(queued) <= req.TTL/2 {
				return b.newLease(k, req, fence, queued), queued, nil, true
			}
			// Stalled since: most of the TTL may be gone. Attempt again:
			// if the grant is still ours, the script answers it and
			// restarts its TTL, so the lease counts from that attempt.
			g.forget()
			fence = 0
		}
		sent := time.Now()
		l, err := b.attempt(ctx, k, req, live, g.id())
		if !errors.Is(err, driver.ErrNotAcquired) {
			return l, sent, err, true
		}
		queued = sent
		next, void := nextAttempt(err, every)
		if void {
			return nil, time.Time{}, err, true
		}
		if fence, err = g.await(ctx, next); err != nil {
			return nil, time.Time{}, err, false
		}
	}
}

// hubWait is a waiter registered with the hub.
type hubWait struct {
	hub         *hub
	w           *waiter
	msgs, epoch uint64 // what mark saw before the last attempt
}

func (h *hubWait) ready(ctx context.Context) (driver.Fence, error) {
	var err error
	if h.msgs, h.epoch, err = h.hub.mark(ctx, h.w); err != nil {
		return 0, err
	}
	return h.hub.granted(h.w), nil
}

func (h *hubWait) forget() { h.hub.clearGrant(h.w) }

func (h *hubWait) await(ctx context.Context, d time.Duration) (driver.Fence, error) {
	if err := h.hub.awaitRelease(ctx, h.w, h.msgs, h.epoch, d); err != nil {
		return 0, err
	}
	return h.hub.granted(h.w), nil
}

func (h *hubWait) id() string { return h.hub.id }

// nextAttempt is how long a refused queued attempt waits before the next
// one at most (the holder's remaining TTL, capped by every), and whether
// the refusal ends the wait (the token was voided: nothing to wait for).
func nextAttempt(err error, every time.Duration) (time.Duration, bool) {
	var r *refused
	if errors.As(err, &r) {
		switch {
		case r.pttl >= 0:
			return min(r.pttl, every), false
		case r.pttl == -3*time.Millisecond:
			return 0, true
		}
	}
	return every, false
}

// refresh is how often a queued waiter renews its place in line: often
// enough that a grant handed to it leaves most of its TTL locally known
// (its lease counts from the last refresh), and at least every recheck.
func refresh(ttl time.Duration) time.Duration { return max(min(recheck, ttl/4), time.Millisecond) }

// liveness is how long a waiter's place outlives its last refresh: three
// refreshes missed (a stalled or dead waiter) and the next release skips
// it. A dead waiter can thus be handed the lock only within this window
// after it died, and then holds it for one TTL at most.
func liveness(every time.Duration) time.Duration { return max(3*every, 300*time.Millisecond) }

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

// clearGrant forgets a grant handed to w.
func (h *hub) clearGrant(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.fence = 0
}

// awaitRelease returns nil once a grant was handed to w, a release was heard on w's channel since
// msgs was read, the subscription connection broke since epoch, or after
// d; ctx.Err() if ctx ends first.
func (h *hub) awaitRelease(ctx context.Context, w *waiter, msgs, epoch uint64, d time.Duration) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	for {
		h.mu.Lock()
		changed := h.msgs[w.channel] != msgs || h.epoch != epoch || w.fence != 0
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

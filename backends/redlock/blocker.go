package redlock

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/fencelock/fencelock/driver"
)

var _ driver.Blocker = (*backend)(nil)

// Acquire implements driver.Blocker: the portable Client's blocking
// Acquire calls it instead of polling TryAcquire.
//
// The blocked acquires of one Client on one lock queue up locally, in
// arrival order, and only the first of them makes attempts on the
// primaries; the others send nothing until it is granted or gives up. So
// every Client puts at most one contender per lock on the primaries: a
// release is contended by one waiter per Client instead of all of them,
// which keeps the primaries' votes from splitting (see the package doc's
// # Waiting) and bounds how long a waiter can be passed over. Between
// Clients there is no order (Capabilities.FIFO is false).
//
// The first waiter retries after a release notice (Wait), bounded by a
// jittered backoff from 2ms doubling to 100ms (fencelock's default; this
// backend does not use Options.Backoff). Every attempt has a fresh token:
// an abandoned attempt's token is void on the primaries. ErrUnavailable
// and other errors end the wait, as in the portable loop.
func (b *backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	t, err := b.join(req.Name)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer b.leave(req.Name, t)
	select {
	case <-t.turn:
	case <-ctx.Done():
		return nil, time.Time{}, ctxErr(ctx, "acquire", "queued behind this Client's earlier waiters")
	case <-b.ctx.Done():
		return nil, time.Time{}, errClosed
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			req.Token = newToken()
		}
		l, sent, err := b.try(ctx, req)
		if err == nil {
			b.granted(req.Name, t)
			return l, sent, nil
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			return nil, time.Time{}, err
		}
		if ctx.Err() != nil {
			return nil, time.Time{}, ctxErr(ctx, "acquire", "waiting for the lock")
		}
		wctx, cancel := context.WithTimeout(ctx, backoff(attempt))
		werr := b.wait(wctx, req.Name, t.kick)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, time.Time{}, ctxErr(ctx, "acquire", "waiting for the lock")
		case errors.Is(werr, driver.ErrClosed):
			return nil, time.Time{}, errClosed
		}
	}
}

// backoff is fencelock's default: full jitter from 2ms doubling to 100ms.
func backoff(attempt int) time.Duration {
	const base, ceil = 2 * time.Millisecond, 100 * time.Millisecond
	c := ceil
	if attempt < 6 {
		c = base << attempt
	}
	return base/2 + rand.N(c-base/2+1)
}

// newToken returns a 128-bit random owner token (32 hex characters), as
// the portable layer makes them.
func newToken() string {
	var buf [16]byte
	_, _ = crand.Read(buf[:])
	return hex.EncodeToString(buf[:])
}

// ticket is one blocked Acquire's place in its Client's local queue.
type ticket struct {
	turn   chan struct{} // closed when it is first in line
	kick   chan struct{} // cap 1: a lease of this Client on the lock was just released
	kicked bool          // a kick was sent to it (under b.mu)
}

// maxStreak is how many hand-offs in a row a Client may make to its own
// next waiter (see handOff).
const maxStreak = 3

// handOff is called when a lease of this Client on name was released
// (by a majority). If another Acquire of this Client waits for name, it is
// told at once instead of through the primaries' release notices, so it
// retries about a round trip before the other Clients' waiters: a local
// hand-off, as cheap as an uncontended acquire. To keep the other Clients
// from starving, a Client makes at most maxStreak such hand-offs in a
// row; then its next waiter races the others on the notices like them.
func (b *backend) handOff(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[name]
	if len(q) == 0 {
		return
	}
	if b.streaks[name] >= maxStreak {
		delete(b.streaks, name)
		return
	}
	b.streaks[name]++
	q[0].kicked = true
	select {
	case q[0].kick <- struct{}{}:
	default:
	}
}

// granted ends a streak of local hand-offs when t got the lock without one.
func (b *backend) granted(name string, t *ticket) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !t.kicked {
		delete(b.streaks, name)
	}
}

// join appends a ticket to name's local queue; the first in line gets
// its turn at once.
func (b *backend) join(name string) (*ticket, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	t := &ticket{turn: make(chan struct{}), kick: make(chan struct{}, 1)}
	q := b.queues[name]
	if len(q) == 0 {
		close(t.turn)
	}
	b.queues[name] = append(q, t)
	return t, nil
}

// leave removes t from name's queue and gives the turn to the next.
func (b *backend) leave(name string, t *ticket) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[name]
	for i, x := range q {
		if x != t {
			continue
		}
		q = append(q[:i:i], q[i+1:]...)
		if i == 0 && len(q) > 0 {
			close(q[0].turn)
		}
		break
	}
	if len(q) == 0 {
		delete(b.queues, name)
		delete(b.streaks, name)
	} else {
		b.queues[name] = q
	}
}

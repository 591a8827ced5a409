package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// lease is a lock granted by a majority of primaries under token.
type lease struct {
	b     *backend
	k     keys
	token string
	fence uint64
	at    *attempt // what the acquire learnt about each primary
	epoch uint64   // the backend's KillSessions epoch at grant

	// waiter is the blocked Acquire's id in the lead primary's queue ("":
	// TryAcquire); the release takes it out (see try).
	waiter string

	labelVersion atomic.Uint64 // the last SetLabel's version (labelValue)
}

func (l *lease) Fence() driver.Fence { return driver.Fence(l.fence) }

// errCut is returned for a lease whose connections KillSessions cut.
var errCut = fmt.Errorf("%w: redlock: this lease's connections were cut by KillSessions (Admin): it can no longer be renewed or released and ends with its TTL", driver.ErrUnavailable)

// targets splits the primaries into those that may hold our token and
// the number that cannot (they refused the acquire, or never got it).
func (l *lease) targets() (idx []int, notOurs int) {
	for i := range l.b.nodes {
		if l.at.mayHold(i) {
			idx = append(idx, i)
		} else {
			notOurs++
		}
	}
	return idx, notOurs
}

// Extend resets the lock's expiry to ttl on every primary that still holds
// our token. It succeeds when a majority did so within the validity of ttl
// (ttl − DriftFactor×ttl − DriftMin from when it started); it returns
// ErrLeaseLost (and frees what is left of the lock) when so many primaries
// no longer hold the token that no majority can, and ErrUnavailable when
// too few answered to tell.
func (l *lease) Extend(ctx context.Context, ttl time.Duration) error {
	if l.epoch != l.b.epoch.Load() {
		return errCut
	}
	start := time.Now()
	validity := ttl - drift(ttl)
	n, q := len(l.b.nodes), l.b.quorum
	idx, notOurs := l.targets()
	deadline := start.Add(validity)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	ms := millis(ttl)
	replies := l.b.fan(deadline, idx, func(ctx context.Context, i int) (int64, int64, error) {
		v, err := extendScript.Run(ctx, l.b.nodes[i].c, []string{l.k.lock, l.k.label(l.token)}, l.token, ms).Int64()
		return v, 0, err
	})
	ok := 0
	var errs []error
	for got := 0; got < len(idx) && ok < q && notOurs <= n-q; got++ {
		select {
		case r := <-replies:
			switch {
			case r.err != nil:
				errs = append(errs, nodeErr(l.b.nodes[r.i].addr, "extend", r.err))
			case r.a == 1:
				ok++
			default:
				notOurs++
			}
		case <-ctx.Done():
			return ctxErr(ctx, "extend", fmt.Sprintf("%d of %d primaries had extended, %d needed", ok, n, q))
		}
	}
	switch {
	case ok >= q:
		if el := time.Since(start); el >= validity {
			return fmt.Errorf("%w: redlock extend: a majority answered only after %v, past the validity of the %v TTL", driver.ErrUnavailable, el.Round(time.Microsecond), ttl)
		}
		return nil
	case notOurs > n-q:
		l.freeRest()
		return fmt.Errorf("%w: only %d of %d primaries still hold this lease's key (it expired, a primary restarted empty, or another owner took it); a majority of %d is needed", driver.ErrLeaseLost, n-notOurs, n, q)
	}
	return fmt.Errorf("%w: redlock extend: %d of %d primaries extended, %d needed: %w", driver.ErrUnavailable, ok, n, q, errors.Join(errs...))
}

// freeRest releases, in the background, whatever primaries still hold the
// token of a lease found lost.
func (l *lease) freeRest() {
	idx, _ := l.targets()
	if len(idx) > 0 {
		l.b.fan(time.Now().Add(cleanupTimeout), idx, l.releaseOn)
	}
}

// releaseOn runs the release script on primary i: compare-and-delete and
// publish, first voiding the token where the acquire's reply never came.
func (l *lease) releaseOn(ctx context.Context, i int) (int64, int64, error) {
	var void int64
	if l.at.uncertain(i) {
		void = voidLifetime.Milliseconds()
	}
	ks, as := []string{l.k.lock, l.k.void(l.token)}, []any{l.token, l.k.channel, void, l.k.lock}
	if i == lead {
		// The queue's keys, so that the notice names the next waiter.
		ks, as = append(ks, l.k.queue, l.k.queueDL), append(as, l.waiter)
	}
	v, err := releaseScript.Run(ctx, l.b.nodes[i].c, ks, as...).Int64()
	return v, 0, err
}

// Release deletes the lock key on every primary where it holds our token
// and publishes a release notice there. It returns nil once a majority
// released, ErrLeaseLost when so many did not hold the token that the lock
// was no longer ours, and ErrUnavailable when too few answered to tell.
// Primaries that answer after the decision are released in the background.
func (l *lease) Release(ctx context.Context) error {
	if l.epoch != l.b.epoch.Load() {
		return errCut
	}
	n, q := len(l.b.nodes), l.b.quorum
	idx, notOurs := l.targets()
	if l.waiter != "" && !l.at.mayHold(lead) {
		l.b.dequeue(l.k.lock, l.waiter) // granted without the lead, where it is queued
	}
	replies := l.b.fan(deadlineOf(ctx, cleanupTimeout), idx, l.releaseOn)
	rel := 0
	var errs []error
	for got := 0; got < len(idx) && rel < q && notOurs <= n-q; got++ {
		select {
		case r := <-replies:
			switch {
			case r.err != nil:
				errs = append(errs, nodeErr(l.b.nodes[r.i].addr, "release", r.err))
			case r.a == 1:
				rel++
			default:
				notOurs++
			}
		case <-ctx.Done():
			return ctxErr(ctx, "release", fmt.Sprintf("%d of %d primaries had released", rel, n))
		}
	}
	switch {
	case rel >= q:
		l.b.handOff(l.k.lock)
		return nil
	case notOurs > n-q:
		return fmt.Errorf("%w: only %d of %d primaries still held this lease's key (it expired, a primary restarted empty, or another owner took it)", driver.ErrLeaseLost, n-notOurs, n)
	}
	return fmt.Errorf("%w: redlock release: %d of %d primaries released, %d needed to be sure: %w", driver.ErrUnavailable, rel, n, q, errors.Join(errs...))
}

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
	// handsOff: the lease was granted to a blocked Acquire that had to
	// wait (an ordered or named attempt): its release hands the lock to
	// the next waiter when one is queued (see Hand-off, below).
	handsOff bool
	// gone is the token of the lease handed off to this one, whose keys
	// its acquire took over on the other primaries, or "" (see Hand-off).
	gone string

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
	return l.release(ctx, i, false)
}

// handOffOn runs the release script on the lead primary i, handing the
// lock to the next waiter there if one is queued (2; see Hand-off).
func (l *lease) handOffOn(ctx context.Context, i int) (int64, int64, error) {
	return l.release(ctx, i, true)
}

func (l *lease) release(ctx context.Context, i int, handOff bool) (int64, int64, error) {
	var void int64
	if l.at.uncertain(i) {
		void = voidLifetime.Milliseconds()
	}
	ks, as := []string{l.k.lock, l.k.void(l.token)}, []any{l.token, l.k.channel, void, l.k.lock}
	if i == lead {
		// The queue's keys, so that the notice names the next waiter.
		ks, as = append(ks, l.k.queue, l.k.queueDL), append(as, l.waiter)
		if handOff {
			ks = append(ks, l.k.gone)
		}
	}
	v, err := releaseScript.Run(ctx, l.b.nodes[i].c, ks, as...).Int64()
	return v, 0, err
}

// Hand-off (internals).
//
// The release of a lease granted to a blocked Acquire that had to wait
// (handsOff: the lock is contended) asks the lead primary first. When a
// live waiter is queued there, the lead's release script deletes our key,
// names the waiter in its notice with our token, keeps our token in K
// "\xff:gone" for as long as our key had left, and returns 2: the
// release is then done, and our keys on the other primaries are left to
// the waiter, whose acquire script takes over a key holding our token as
// if it were free (it learns the token from the notice, or, in an ordered
// attempt, from the lead's grant). Only the primaries that confirmed our
// grant are left to it: where our acquire's reply never came, the
// release still releases and voids our token (in the background), so
// that a late request of ours cannot take a key nobody will take over.
// That saves the release's calls to the other primaries: under 8-way
// contention on five primaries, 7 script calls per grant instead of 11.
// Our token is never used again, so taking over its keys deletes no
// other holder's lock; and the fence proof (atop
// redlock.go) holds as before, since the waiter's script reads each
// primary's counter, which our grant had raised, in the step that takes
// the key over. If the waiter never comes (its Client died, or gave up
// between the notice and its attempt), the next waiter's ordered attempt
// learns the token from the lead and takes the keys over; a plain attempt
// (TryAcquire, an Acquire's first try) is refused by them until then, or
// until they expire with our TTL.
//
// Without a queued waiter the lead's script releases as usual (1), and
// the other primaries are asked then, one round trip later. So the
// release of an uncontended lease (TryAcquire, or an Acquire granted at
// its first, plain attempt) asks every primary at once, as does every
// release while the lead is slow (backend.leadSlow); a lead that has not
// answered within leadWait is not waited for either.

// releaseLeadFirst asks the lead primary to release and hand the lock to
// the next waiter (see Hand-off). handedOff: it did, and the release is
// done. Otherwise replies receives the replies of every primary in idx,
// the lead's included, as Release counts them.
func (l *lease) releaseLeadFirst(ctx context.Context, deadline time.Time, idx []int) (replies <-chan reply, handedOff bool, err error) {
	ch := make(chan reply, len(idx))
	l.b.fanInto(ch, deadline, []int{lead}, l.handOffOn)
	wait := time.NewTimer(min(leadWait, time.Until(deadline)))
	defer wait.Stop()
	select {
	case r := <-ch:
		if r.err == nil && r.a == 2 {
			l.b.handOff(l.k.lock)
			l.releaseUncertain(deadline)
			return nil, true, nil
		}
		ch <- r // counted with the others' replies
	case <-wait.C:
		l.b.leadSlow.Store(true)
	case <-ctx.Done():
		err = ctxErr(ctx, "release", "waiting for the lead primary")
	}
	rest := make([]int, 0, len(idx))
	for _, i := range idx {
		if i != lead {
			rest = append(rest, i)
		}
	}
	// Also when ctx ended: the lead may have released without handing
	// off, and the other primaries' keys must not wait for their TTL.
	l.b.fanInto(ch, deadline, rest, l.releaseOn)
	return ch, false, err
}

// releaseUncertain releases, in the background, our token on the
// primaries other than the lead whose acquire reply never came, and voids
// it there, after the lead handed the lock off (see Hand-off): the waiter
// takes over only keys that hold our token when its request lands, and an
// acquire request of ours that lands later must not take the key then.
// Where our request never ran, the key of the lease handed off to us may
// still be there, and nobody else would take it over: it goes too
// (drop.lua).
func (l *lease) releaseUncertain(deadline time.Time) {
	var idx []int
	for i := range l.b.nodes {
		if i != lead && l.at.uncertain(i) {
			idx = append(idx, i)
		}
	}
	if len(idx) > 0 {
		l.b.fan(deadline, idx, func(ctx context.Context, i int) (int64, int64, error) {
			v, err := dropScript.Run(ctx, l.b.nodes[i].c, []string{l.k.lock, l.k.void(l.token)}, l.token, voidLifetime.Milliseconds(), l.gone).Int64()
			return v, 0, err
		})
	}
}

// Release deletes the lock key on every primary where it holds our token
// and publishes a release notice there, or, for a contended lease, hands
// the lock to the lead's next waiter (see Hand-off). It returns nil once
// a majority released or the lead handed off, ErrLeaseLost when so many
// did not hold the token that the lock was no longer ours, and
// ErrUnavailable when too few answered to tell.
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
	deadline := deadlineOf(ctx, cleanupTimeout)
	var replies <-chan reply
	if l.handsOff && l.at.mayHold(lead) && !l.b.leadSlow.Load() {
		var handedOff bool
		var err error
		if replies, handedOff, err = l.releaseLeadFirst(ctx, deadline, idx); handedOff || err != nil {
			return err
		}
	} else {
		replies = l.b.fan(deadline, idx, l.releaseOn)
	}
	rel := 0
	var errs []error
	for got := 0; got < len(idx) && rel < q && notOurs <= n-q; got++ {
		select {
		case r := <-replies:
			switch {
			case r.err == nil && r.a == 2: // the lead handed off (see Hand-off): it answered late
				l.b.handOff(l.k.lock)
				return nil
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

// Package faulttest holds fault scenarios that several backends' tests run
// the same way against their own real servers: the backend supplies the
// clients and the fault, the scenario drives it, checks the lease
// contract and records the outcome (internal/faultrec).
package faulttest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
	"github.com/fencelock/fencelock/internal/faultrec"
)

// Partition is one client-partition scenario: Cut reaches the store only
// through connections that Pause stops moving bytes on (paused proxies),
// Other reaches it directly.
type Partition struct {
	Backend string            // for the fault record
	Cut     *fencelock.Client // the holder's client, behind the proxies
	Other   *fencelock.Client // the waiter's client
	Pause   func()            // cut Cut off (connections stay open)
	Resume  func()            // heal
	Name    string            // the lock name
	TTL     time.Duration     // the holder's TTL
	// Hold is the holder's AcquireOptions (nil: TTL, auto-renew on) and
	// Wait the waiter's (nil: TTL 30s, Wait 30s).
	Hold, Wait *fencelock.AcquireOptions
	// Settle, if set, runs once the holder holds (e.g. until every server
	// answered the acquire) and after the stale Release.
	Settle func()
	// Queued, if set, blocks until the store shows the waiter queued.
	Queued func()
	// LostWithin bounds holder's lease end after the cut, and GrantWithin
	// the waiter's grant after the cut.
	LostWithin, GrantWithin time.Duration
	// Story is the record's note: a format taking the TTL, when the lease
	// ended and when the waiter was granted (after the cut).
	Story string
}

// ClientPartitioned cuts the holder off while another client waits. The
// holder's renewals cannot arrive: its lease must end (ErrLeaseLost) by
// LostWithin; the waiter must be granted after the holder's ValidUntil,
// with a higher fence; the stale holder's fenced write must be rejected;
// after the heal its Release must be ErrLeaseLost and leave the new
// holder's lock alone.
func ClientPartitioned(t *testing.T, p Partition) {
	t.Helper()
	rec := faultrec.Begin(t, faultrec.Result{Backend: p.Backend, Scenario: faultrec.ClientPartitioned})
	rec.File, rec.Line = faultrec.Caller(1) // the backend's test, not this scenario
	ctx := t.Context()
	hold, wait := p.options()
	l, err := p.Cut.TryAcquire(ctx, p.Name, hold)
	if err != nil {
		t.Fatal(err)
	}
	if p.Settle != nil {
		p.Settle()
	}
	var res guard.Counter
	v, err := res.Claim(ctx, l.Fence())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan grant, 1)
	go func() {
		l2, err := p.Other.Acquire(ctx, p.Name, wait)
		got <- grant{l2, err, time.Now()}
	}()
	if p.Queued != nil {
		p.Queued()
	}

	p.Pause()
	resumed := false
	defer func() {
		if !resumed {
			p.Resume()
		}
	}()
	paused := time.Now()
	lostAt := p.awaitLoss(t, l, paused)
	rec.Outcome = faultrec.Lost
	g := p.awaitGrant(t, got, paused)
	defer g.l.Release(ctx)
	rec.WaitGranted, rec.WaitFrom = g.at.Sub(paused), "partition"
	checkFenced(t, rec, &res, l, g, v)
	rec.Note = fmt.Sprintf(p.Story, p.TTL, lostAt.Sub(paused).Round(time.Millisecond), g.at.Sub(paused).Round(time.Millisecond))

	p.Resume()
	resumed = true
	p.checkHealed(t, l, g)
	t.Logf("%s", rec.Note)
}

// options are the holder's and the waiter's AcquireOptions, defaults
// filled in (see Partition.Hold).
func (p *Partition) options() (hold, wait *fencelock.AcquireOptions) {
	hold, wait = p.Hold, p.Wait
	if hold == nil {
		hold = &fencelock.AcquireOptions{TTL: p.TTL}
	}
	if wait == nil {
		wait = &fencelock.AcquireOptions{TTL: 30 * time.Second, Wait: 30 * time.Second}
	}
	return hold, wait
}

// grant is the waiter's Acquire: its lease or error, and when it returned.
type grant struct {
	l   *fencelock.Lease
	err error
	at  time.Time
}

// awaitLoss waits, up to LostWithin after the cut (at paused), for the
// holder's lease l to end with ErrLeaseLost, and returns when it ended.
func (p *Partition) awaitLoss(t *testing.T, l *fencelock.Lease, paused time.Time) time.Time {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(p.LostWithin):
		t.Fatalf("partitioned lease still held %v after the partition (TTL %v)", time.Since(paused), p.TTL)
	}
	lostAt := time.Now()
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("partitioned lease Err = %v, want ErrLeaseLost", l.Err())
	}
	return lostAt
}

// awaitGrant waits, up to GrantWithin after the cut (at paused), for the
// waiter's grant.
func (p *Partition) awaitGrant(t *testing.T, got <-chan grant, paused time.Time) grant {
	t.Helper()
	var g grant
	select {
	case g = <-got:
	case <-time.After(p.GrantWithin):
		t.Fatalf("waiter not granted %v after the partition (TTL %v)", time.Since(paused), p.TTL)
	}
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	return g
}

// checkFenced checks the waiter's grant g against the partitioned
// holder's lease l: granted after l's ValidUntil, with a higher fence, and
// the holder's write (claimed at v) is refused by the resource res once
// the waiter wrote. It records the fence and overlap in rec.
func checkFenced(t *testing.T, rec *faultrec.Result, res *guard.Counter, l *fencelock.Lease, g grant, v int64) {
	t.Helper()
	ctx := t.Context()
	vu := l.ValidUntil()
	rec.Fence = faultrec.FenceOf(l.Fence(), g.l.Fence())
	rec.SecondHolder = faultrec.OverlapOf(!g.at.After(vu))
	if !g.at.After(vu) {
		t.Fatalf("waiter granted %v before the partitioned lease's ValidUntil: two holders", vu.Sub(g.at))
	}
	if g.l.Fence() <= l.Fence() {
		t.Fatalf("waiter's fence %d not above the partitioned holder's %d", g.l.Fence(), l.Fence())
	}
	wv, err := res.Claim(ctx, g.l.Fence())
	if err != nil {
		t.Fatal(err)
	}
	if err := res.WriteClaimed(ctx, g.l.Fence(), wv+1); err != nil {
		t.Fatal(err)
	}
	if err := res.WriteClaimed(ctx, l.Fence(), v+100); !errors.Is(err, guard.ErrStale) {
		rec.SecondHolder = faultrec.OverlapFound
		t.Fatalf("stale holder's write: %v, want guard.ErrStale", err)
	}
}

// checkHealed checks, after the heal, that the stale holder's Release is
// ErrLeaseLost and leaves the waiter's lease (g) held.
func (p *Partition) checkHealed(t *testing.T, l *fencelock.Lease, g grant) {
	t.Helper()
	ctx := t.Context()
	if err := l.Release(ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("stale Release after the partition healed: %v, want ErrLeaseLost", err)
	}
	if p.Settle != nil {
		p.Settle()
	}
	if _, err := p.Other.TryAcquire(ctx, p.Name, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire after the stale Release: %v (the stale holder freed the new holder's lock?)", err)
	}
	if g.l.Err() != nil {
		t.Fatalf("new holder's lease ended: %v", g.l.Err())
	}
}

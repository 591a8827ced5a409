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
	hold, wait := p.Hold, p.Wait
	if hold == nil {
		hold = &fencelock.AcquireOptions{TTL: p.TTL}
	}
	if wait == nil {
		wait = &fencelock.AcquireOptions{TTL: 30 * time.Second, Wait: 30 * time.Second}
	}
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
	type grant struct {
		l   *fencelock.Lease
		err error
		at  time.Time
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
	select {
	case <-l.Done():
	case <-time.After(p.LostWithin):
		t.Fatalf("partitioned lease still held %v after the partition (TTL %v)", time.Since(paused), p.TTL)
	}
	lostAt := time.Now()
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("partitioned lease Err = %v, want ErrLeaseLost", l.Err())
	}
	rec.Outcome = faultrec.Lost
	var g grant
	select {
	case g = <-got:
	case <-time.After(p.GrantWithin):
		t.Fatalf("waiter not granted %v after the partition (TTL %v)", time.Since(paused), p.TTL)
	}
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	defer g.l.Release(ctx)
	vu := l.ValidUntil()
	rec.WaitGranted, rec.WaitFrom = g.at.Sub(paused), "partition"
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
	rec.Note = fmt.Sprintf(p.Story, p.TTL, lostAt.Sub(paused).Round(time.Millisecond), g.at.Sub(paused).Round(time.Millisecond))

	p.Resume()
	resumed = true
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
	t.Logf("%s", rec.Note)
}

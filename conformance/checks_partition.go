package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance/netfault"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/faultrec"
)

func init() {
	register(
		check{name: "PartitionBlackholeHolderEndsFirst", run: func(t TB, e *env) { testPartition(t, e, netfault.Blackhole) }},
		check{name: "PartitionResetHolderEndsFirst", run: func(t TB, e *env) { testPartition(t, e, netfault.Reset) }},
		check{name: "PartitionLiveness", run: testPartitionLiveness},
	)
}

// partitioned returns a new client whose connections to the store pass
// through fault proxies (the harness's Partitioner), healed and closed at
// the check's end; it skips the check if the harness cannot make one.
func (e *env) partitioned(t TB) (*fencelock.Client, *Faults) {
	t.Helper()
	p, ok := e.h.(Partitioner)
	if !ok {
		t.Skipf("harness has no Partitioner hook (the URL harness has one)")
	}
	c, f, err := p.PartitionedClient(e.ctx, &fencelock.Options{Prefix: e.prefix})
	if errors.Is(err, fencelock.ErrInvalid) && e.h.URL() == "" {
		notApplicable(t, "the store lives in this process: there is no network between the client and the store to cut")
	}
	if errors.Is(err, fencelock.ErrInvalid) {
		t.Skipf("no fault proxy can stand between a client and this store: %v", err)
	}
	mustNil(t, err, "PartitionedClient")
	t.Cleanup(func() {
		f.Heal() // so that Close can release what is left
		_ = c.Close()
		f.Close()
	})
	return c, f
}

// cutSet is the nodes a partition cuts the holder from: all of them, or,
// where the backend's client itself keeps each lock on a quorum of
// independent nodes (it has a QuorumAdmin: Redlock), just a majority (the
// client still reaches the rest, and must lose the lease anyway). A
// client of a replicated store (an etcd or ZooKeeper cluster) that still
// reaches one member reaches the store.
func (e *env) cutSet(f *Faults) []int {
	n := f.Nodes()
	k := n
	if _, ok := e.admin().(driver.QuorumAdmin); ok && n >= 3 {
		k = n/2 + 1
	}
	nodes := make([]int, k)
	for i := range nodes {
		nodes[i] = i
	}
	return nodes
}

// waitRenewed waits until l's ValidUntil has moved past its value at the
// call: one renewal reached the store and was answered. It fails the
// check after within.
func (e *env) waitRenewed(t TB, l *fencelock.Lease, within time.Duration) {
	t.Helper()
	vu := l.ValidUntil()
	deadline := time.Now().Add(within)
	e.waiting("a renewal of the holder's lease")
	for !l.ValidUntil().After(vu) {
		if l.Err() != nil {
			t.Fatalf("the lease ended before its first renewal: %v", l.Err())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease was not renewed within %v (TTL %v, renewals at TTL/3)", within, e.ttl)
		}
		e.sleep(5 * time.Millisecond)
	}
}

// grant is a waiter's Acquire result, with the holder's state sampled the
// moment it returned.
type grant struct {
	l   *fencelock.Lease
	err error
	at  time.Time
	// The holder's lease at that moment: still held (no Err) and valid
	// (at before holderVU) means both believed they held the lock.
	holderErr error
	holderVU  time.Time
}

// overlapped reports whether the waiter was granted while the holder
// still believed it held the lock.
func (g grant) overlapped() bool { return g.holderErr == nil && g.at.Before(g.holderVU) }

// acquireSampling starts c.Acquire(name) on its own goroutine; when it
// returns, the holder's lease is sampled at once.
func (e *env) acquireSampling(c *fencelock.Client, name string, holder *fencelock.Lease, wait time.Duration) <-chan grant {
	got := make(chan grant, 1)
	go func() {
		l, err := c.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: wait})
		g := grant{l: l, err: err, at: time.Now(), holderErr: holder.Err(), holderVU: holder.ValidUntil()}
		got <- g
	}()
	return got
}

// liveBound is how long after a holder was cut off the store must have
// granted its lock to a waiter: the effective TTL, the declared
// ExpiryWake with its tolerance (or the suite's margin where the backend
// declares none).
func (e *env) liveBound() time.Duration {
	if w := e.caps.ExpiryWake; w > 0 {
		return e.effTTL() + w + promiseTol(w)
	}
	return e.effTTL() + e.margin
}

// testPartition: a holder cut off from the store (a blackhole: nothing
// passes, nothing closes; or a reset: every connection ends and new ones
// are refused) while a client that reaches the store directly waits.
// Every grant to the waiter comes after the holder's lease ended or its
// ValidUntil passed (sampled when the waiter's Acquire returns: a store
// that frees the lock when the connection breaks, before the holder can
// know, is caught here); the fence rises; the holder's lease ends by its
// ValidUntil; after the heal its Extend and Release report ErrLeaseLost
// and leave the new holder's lock alone.
func testPartition(t TB, e *env, mode netfault.Mode) {
	a, f := e.partitioned(t)
	nodes := e.cutSet(f)
	kind := mode.String()
	if len(nodes) < f.Nodes() {
		kind = fmt.Sprintf("%s of %d of %d nodes", mode, len(nodes), f.Nodes())
	}
	rec := faultrec.Begin(t, faultrec.Result{Backend: e.caps.Backend, Scenario: faultrec.ClientPartitioned, Case: kind})
	b, c := e.client(), e.client()
	name := e.name("x")
	la, err := a.Acquire(e.ctx, name, opts(e.ttl, true))
	mustNil(t, err, "Acquire through the fault proxy")
	if f.Accepted() == 0 {
		t.Fatalf("the client reached the store without a connection through the fault proxies")
	}
	ended := make(chan time.Time, 1)
	context.AfterFunc(la.Context(), func() { ended <- time.Now() })
	got := e.acquireSampling(b, name, la, e.liveBound()+e.margin)
	e.waitRenewed(t, la, e.ttl+e.margin)

	cut := time.Now()
	vuAtCut := la.ValidUntil()
	f.Cut(mode, 0, nodes...)
	e.waiting(fmt.Sprintf("the direct client's grant after the holder was cut off (%s of %d of %d nodes)", mode, len(nodes), f.Nodes()))
	var g grant
	select {
	case g = <-got:
	case <-time.After(e.liveBound() + e.margin):
		t.Fatalf("the direct client was not granted %v after the holder was cut off (%s; TTL %v, store TTL %v)", time.Since(cut).Round(time.Millisecond), mode, e.ttl, e.storeTTL)
	}
	mustNil(t, g.err, "the direct client's Acquire after the partition")
	t.Cleanup(func() { _ = g.l.Release(context.Background()) })
	rec.WaitGranted, rec.WaitFrom = g.at.Sub(cut), "partition"
	rec.Fence = faultrec.FenceOf(la.Fence(), g.l.Fence())
	rec.SecondHolder = faultrec.OverlapOf(g.overlapped())
	declared := ""
	if g.overlapped() {
		overlap := e.breakOverlap(t, mode, g, ended)
		if overlap < 0 {
			rec.Note = fmt.Sprintf("two holders: granted while the holder's lease was valid for %v more", g.holderVU.Sub(g.at).Round(time.Millisecond))
			t.Fatalf("two holders: the direct client was granted %v after the cut (%s) while the partitioned holder's lease was still held and valid for %v more (the backend declares BreakOverlap %v)",
				g.at.Sub(cut).Round(time.Millisecond), mode, g.holderVU.Sub(g.at).Round(time.Millisecond), e.caps.BreakOverlap)
		}
		rec.SecondHolder = faultrec.OverlapDeclared
		declared = fmt.Sprintf("; two holders for %v, within the declared BreakOverlap %v", overlap.Round(time.Millisecond), e.caps.BreakOverlap)
	}
	e.checkFence(t, la.Fence(), g.l.Fence(), "grant after the partition")
	e.waiting("the partitioned holder's lease to end")
	if !waitDone(la, time.Until(vuAtCut)+e.margin) {
		t.Fatalf("the partitioned holder's lease still held %v after its ValidUntil at the cut", time.Since(vuAtCut).Round(time.Millisecond))
	}
	mustIs(t, la.Err(), fencelock.ErrLeaseLost, "Err of the partitioned holder's lease")
	rec.Outcome = faultrec.Lost
	end := <-ended
	holderEnd := end
	if vuAtCut.Before(end) {
		holderEnd = vuAtCut
	}
	rec.Note = fmt.Sprintf("TTL %v (store %v): the holder's lease ended %v after the cut, the direct client was granted %v after that%s",
		e.ttl, e.storeTTL, end.Sub(cut).Round(time.Millisecond), g.at.Sub(holderEnd).Round(time.Millisecond), declared)
	t.Logf("%s of %d/%d nodes: holder's lease ended %v after the cut (ValidUntil at the cut: +%v); direct client granted %v after the cut, %v after the holder's end",
		mode, len(nodes), f.Nodes(), end.Sub(cut).Round(time.Millisecond), vuAtCut.Sub(cut).Round(time.Millisecond),
		g.at.Sub(cut).Round(time.Millisecond), g.at.Sub(holderEnd).Round(time.Millisecond))

	f.Heal()
	e.waiting("the partitioned holder's Extend and Release after the heal")
	mustIs(t, la.Extend(e.ctx, 0), fencelock.ErrLeaseLost, "the partitioned holder's Extend after the heal")
	mustIs(t, la.Release(e.ctx), fencelock.ErrLeaseLost, "the partitioned holder's Release after the heal")
	e.intact(t, c, g.l, "the partitioned holder's Extend and Release after the heal")
}

// breakOverlap is called when the direct client was granted while the
// cut-off holder still believed it held the lock. Where the backend
// declares BreakOverlap and the connection broke (a reset), it waits for
// the holder's lease to end and returns how long the two overlapped,
// failing the check if that is past the declared bound and its tolerance;
// otherwise it returns -1: the overlap is not allowed.
func (e *env) breakOverlap(t TB, mode netfault.Mode, g grant, ended chan time.Time) time.Duration {
	t.Helper()
	if mode != netfault.Reset || e.caps.BreakOverlap <= 0 {
		return -1
	}
	bound := e.caps.BreakOverlap + promiseTol(e.caps.BreakOverlap)
	e.waiting("the holder's lease to end after its broken connection (declared BreakOverlap)")
	var end time.Time
	select {
	case end = <-ended:
		ended <- end
	case <-time.After(time.Until(g.at.Add(bound))):
		t.Fatalf("two holders: the direct client was granted while the holder's lease was held, and the holder's lease was still held %v later: over the declared BreakOverlap %v and its tolerance", bound, e.caps.BreakOverlap)
	}
	if g.holderVU.Before(end) {
		end = g.holderVU
	}
	overlap := end.Sub(g.at)
	if overlap > bound {
		t.Fatalf("two holders for %v after the holder's connection broke: over the declared BreakOverlap %v and its tolerance (%v)", overlap.Round(time.Millisecond), e.caps.BreakOverlap, bound)
	}
	t.Logf("two holders for %v after the holder's connection broke (declared BreakOverlap %v)", overlap.Round(time.Millisecond), e.caps.BreakOverlap)
	return overlap
}

// testPartitionLiveness: a waiter that has waited before is granted the
// lock of a holder cut off from the store within the effective TTL plus
// the backend's declared ExpiryWake (and its tolerance), counted from the
// cut, and never while the holder still believes it holds.
func testPartitionLiveness(t TB, e *env) {
	a, f := e.partitioned(t)
	b := e.waiterClient()
	name := e.name("x")
	// b waits once and is handed the lock: a returning waiter.
	l0, err := a.Acquire(e.ctx, name, opts(e.ttl, true))
	mustNil(t, err, "Acquire through the fault proxy")
	first := e.acquireSampling(b, name, l0, e.margin)
	mustNil(t, l0.Release(e.ctx), "Release")
	e.waiting("the first hand-off to the direct client")
	g0 := <-first
	mustNil(t, g0.err, "the direct client's first Acquire")
	mustNil(t, g0.l.Release(e.ctx), "Release")

	la, err := a.Acquire(e.ctx, name, opts(e.ttl, true))
	mustNil(t, err, "Acquire through the fault proxy")
	got := e.acquireSampling(b, name, la, e.liveBound()+e.margin)
	e.waitRenewed(t, la, e.ttl+e.margin)
	nodes := e.cutSet(f)
	cut := time.Now()
	f.Cut(netfault.Blackhole, 0, nodes...)
	bound := e.liveBound()
	e.waiting("the returning waiter's grant after the holder was cut off")
	var g grant
	select {
	case g = <-got:
	case <-time.After(bound + e.margin):
		t.Fatalf("the waiter was not granted %v after the holder was cut off", time.Since(cut).Round(time.Millisecond))
	}
	mustNil(t, g.err, "the returning waiter's Acquire after the partition")
	t.Cleanup(func() { _ = g.l.Release(context.Background()) })
	took := g.at.Sub(cut)
	if g.overlapped() {
		t.Fatalf("two holders: the waiter was granted %v after the cut while the partitioned holder's lease was valid for %v more", took.Round(time.Millisecond), g.holderVU.Sub(g.at).Round(time.Millisecond))
	}
	if took > bound {
		t.Fatalf("the returning waiter was granted %v after the holder was cut off: over the effective TTL %v + declared ExpiryWake %v + tolerance (%v in all)",
			took.Round(time.Millisecond), e.effTTL(), e.caps.ExpiryWake, bound)
	}
	t.Logf("returning waiter granted %v after the cut (bound %v: effective TTL %v, ExpiryWake %v)", took.Round(time.Millisecond), bound, e.effTTL(), e.caps.ExpiryWake)
}

package conformance

import (
	"fmt"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance/netfault"
	"github.com/fencelock/fencelock/driver"
)

func init() {
	register(
		check{name: "FenceIndependentOfStoreState", run: testFenceStoreState},
		check{name: "QuorumMinorityCut", run: testQuorumMinorityCut},
	)
}

// testFenceStoreState holds the fence to what the backend declares about
// where it lives, with the admin hooks the declaration calls for:
//
//   - a per-name fence record (driver.FenceAdmin) still carries the last
//     fence after its Release (a record that drops it on Release is hidden
//     by a clock floor on one machine, not on several);
//   - a time-floored fence (Capabilities.Fence) keeps rising after the
//     store lost the name's fence state (DropFenceState: an empty
//     restart, a failover, another client deleting the record), so a
//     time-floored backend must implement FenceAdmin;
//   - fences keep rising while the store is busy with unrelated
//     long-lived work (driver.LoadAdmin: on PostgreSQL an open write
//     transaction, which holds back the snapshot horizon).
//
// It does not apply to a backend whose fence is a store-wide counter with
// neither hook (a Raft revision, a zxid).
func testFenceStoreState(t TB, e *env) {
	adm := e.admin()
	fa, hasFA := adm.(driver.FenceAdmin)
	la, hasLA := adm.(driver.LoadAdmin)
	switch {
	case e.caps.Fence == fencelock.FenceTimeFloored && adm != nil && !hasFA:
		t.Fatalf("the backend declares a time-floored fence, but its driver.Admin has no FenceAdmin: the floor cannot be checked")
	case e.caps.Fence == fencelock.FenceTimeFloored && adm == nil:
		t.Skipf("the backend declares a time-floored fence, and the harness has no admin hooks (Administered) to drop its state")
	case !hasFA && !hasLA:
		notApplicable(t, "fences come from a store-wide counter (%s) and the backend has no FenceAdmin or LoadAdmin", e.caps.FenceSource)
	}
	cs := []*fencelock.Client{e.client(), e.client()}
	name := e.name("x")
	var last fencelock.Fence
	grant := func(i int, what string) {
		t.Helper()
		e.waiting(what)
		l, err := cs[i%len(cs)].Acquire(e.ctx, name, opts(longTTL, false))
		mustNil(t, err, "Acquire "+what)
		if last != 0 {
			e.checkFence(t, last, l.Fence(), what)
		}
		last = l.Fence()
		mustNil(t, l.Release(e.ctx), "Release "+what)
	}
	for i := range 3 {
		grant(i, fmt.Sprintf("grant %d", i+1))
	}
	if hasFA {
		stored, ok, err := fa.StoredFence(e.ctx, e.key(name))
		mustNil(t, err, "FenceAdmin.StoredFence")
		if !ok || stored < last {
			t.Fatalf("after the Release of fence %d the store keeps fence state %d (kept: %v) for the name: the next grant's fence is no longer bound to exceed it", last, stored, ok)
		}
		for i := range 3 {
			mustNil(t, fa.DropFenceState(e.ctx, e.key(name)), "FenceAdmin.DropFenceState")
			grant(i, fmt.Sprintf("grant %d after the store lost the name's fence state", i+1))
		}
	}
	if hasLA {
		stop, err := la.Busy(e.ctx)
		mustNil(t, err, "LoadAdmin.Busy")
		defer stop()
		for i := range 4 {
			grant(i, fmt.Sprintf("grant %d while the store is busy with unrelated long-lived work", i+1))
		}
	}
}

// testQuorumMinorityCut, on a backend whose client keeps each lock on a
// quorum of several nodes itself: a holder cut off from a minority of the
// nodes (reset: as if they crashed) keeps its lease over several TTLs and
// nobody else gets the lock; and, with the backend's QuorumAdmin, fences
// keep rising across grants that reach different majorities while one
// node's fence state runs far ahead of the others' (the fence must be
// written back to a majority: one node that saw it is not enough), and the
// stored fence (FenceAdmin) covers each fence granted.
func testQuorumMinorityCut(t TB, e *env) {
	if e.caps.NodeLoss != driver.NodeLossQuorum {
		notApplicable(t, "the backend does not declare that it survives the loss of a minority of nodes")
	}
	a, f := e.partitioned(t)
	n := f.Nodes()
	if n < 3 {
		notApplicable(t, "the client reaches the store through %d address(es); a quorum of independent nodes needs 3 or more", n)
	}
	m := n/2 + 1
	minority := func(from int) []int { // n−m nodes starting at from
		var s []int
		for i := range n - m {
			s = append(s, (from+i)%n)
		}
		return s
	}
	b := e.client()
	name := e.name("x")

	f.Cut(netfault.Reset, 0, minority(m)...)
	l, err := a.Acquire(e.ctx, name, opts(e.ttl, true))
	mustNil(t, err, fmt.Sprintf("Acquire with %d of %d nodes cut off", n-m, n))
	hold := 3 * e.effTTL()
	e.waiting(fmt.Sprintf("the lease to survive %v with a minority cut off", hold))
	if waitDone(l, hold) {
		t.Fatalf("the lease ended (%v) with only %d of %d nodes cut off", l.Err(), n-m, n)
	}
	_, err = b.TryAcquire(e.ctx, name, nil)
	mustIs(t, err, fencelock.ErrNotAcquired, "another client's TryAcquire while the holder keeps a majority")
	mustNil(t, l.Release(e.ctx), "Release with a minority cut off")
	f.Heal()

	qa, ok := e.admin().(driver.QuorumAdmin)
	if !ok {
		t.Logf("no QuorumAdmin: fences across diverged nodes not checked")
		return
	}
	if qa.Nodes() != n {
		t.Fatalf("QuorumAdmin.Nodes() = %d, but the URL lists %d addresses", qa.Nodes(), n)
	}
	fa, _ := e.admin().(driver.FenceAdmin)
	div := e.name("diverged")
	// Node 0 runs far ahead. Grant 1 reaches exactly a majority that
	// includes it (its fence then comes from node 0's state); grant 2 a
	// majority without node 0, which holds that fence only where grant 1
	// wrote it back.
	mustNil(t, qa.RaiseFence(e.ctx, e.key(div), 0, 1e12), "QuorumAdmin.RaiseFence")
	var prev fencelock.Fence
	for i, cut := range [][]int{minority(m), minority(0)} {
		f.Cut(netfault.Reset, 0, cut...)
		l, err := a.Acquire(e.ctx, div, opts(longTTL, false))
		mustNil(t, err, fmt.Sprintf("grant %d with nodes %v cut off", i+1, cut))
		if i > 0 {
			e.checkFence(t, prev, l.Fence(), fmt.Sprintf("grant %d, through a majority without the node that ran ahead, after grant %d through one with it", i+1, i))
		}
		prev = l.Fence()
		mustNil(t, l.Release(e.ctx), "Release")
		f.Heal()
		if fa != nil {
			stored, ok, err := fa.StoredFence(e.ctx, e.key(div))
			mustNil(t, err, "FenceAdmin.StoredFence")
			if !ok || stored < prev {
				t.Fatalf("after grant %d (fence %d, nodes %v cut off) a majority of nodes keeps only fence state %d: the fence was not written back to a majority", i+1, prev, cut, stored)
			}
		}
	}
}

package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
)

// Violation is one way a torture history broke the contract.
type Violation struct {
	Check string // overlap, fence, after-grant, after-drop, ended-waiter, liveness, register, lost-update
	Name  string // the lock name or register
	Msg   string
	// Ops are the operations that witness it; From and To bound them:
	// the smallest window of the history that shows the violation.
	Ops      []int64
	From, To time.Duration
}

func (v Violation) String() string {
	return fmt.Sprintf("%s on %s [%v, %v]: %s", v.Check, v.Name, v.From.Round(time.Millisecond), v.To.Round(time.Millisecond), v.Msg)
}

// CheckHistory checks a torture history against the contract and
// returns every violation found:
//
//   - overlap: no two leases on a name overlap in their holders'
//     validity (from the grant's return to the earliest of Release, Done
//     and ValidUntil) by more than Meta.AllowedOverlap, unless the store
//     itself dropped the earlier one (an expire or restart fault in
//     between);
//   - fence: fences on a name strictly increase in grant order;
//   - after-grant: no Extend or Release of a lease succeeds after the
//     name was granted to another (a lease with a higher fence whose
//     grant returned before the Extend or Release was sent);
//   - ended-waiter: a waiter whose ctx ended holds nothing: its Client's
//     TryAcquire right after is not refused while nobody else can hold
//     the name;
//   - liveness: after the last fault healed, every worker is granted
//     within Meta.LiveBound;
//   - register: each guarded register's history is linearizable
//     (porcupine), and claim-first lost no update.
func CheckHistory(h *History) []Violation {
	ops := h.Ops()
	faults := h.Faults()
	var vs []Violation
	vs = append(vs, checkOverlap(h.Meta, ops, faults)...)
	vs = append(vs, checkFences(ops)...)
	vs = append(vs, checkAfterGrant(ops)...)
	vs = append(vs, checkAfterDrop(ops, faults)...)
	vs = append(vs, checkEndedWaiters(h.Meta, ops)...)
	vs = append(vs, checkLiveness(h.Meta, ops)...)
	vs = append(vs, checkRegisters(ops)...)
	vs = append(vs, checkLostUpdates(ops)...)
	return vs
}

// grantsByName returns each name's grants in completion order.
func grantsByName(ops []Op) map[string][]Op {
	m := map[string][]Op{}
	for _, o := range ops {
		if o.grant() {
			m[o.Name] = append(m[o.Name], o)
		}
	}
	for _, g := range m {
		slices.SortStableFunc(g, func(a, b Op) int { return int(a.Complete - b.Complete) })
	}
	return m
}

func opIndex(ops []Op) map[int64]Op {
	m := make(map[int64]Op, len(ops))
	for _, o := range ops {
		m[o.ID] = o
	}
	return m
}

// storeDropped reports whether the store dropped name's lock itself (an
// expire of name, or a restart that may lose locks) between from and to, and the holder of
// the lease granted at from, told or not, stopped believing by end: at
// its next renewal or its ValidUntil, the longest TTL asked (MaxTTL) and
// a tolerance after the drop at the latest.
func storeDropped(m TortureMeta, faults []Fault, name string, from, to, end time.Duration) bool {
	for _, f := range faults {
		if ((f.Kind == "restart" && m.RestartLosesLocks) || (f.Kind == "expire" && f.Name == name)) && f.End >= from && f.Start <= to && end <= f.End+m.MaxTTL+promiseTol(m.MaxTTL) {
			return true
		}
	}
	return false
}

func checkOverlap(m TortureMeta, ops []Op, faults []Fault) []Violation {
	byID := opIndex(ops)
	var vs []Violation
	for _, b := range ops {
		if !b.grant() {
			continue
		}
		for _, id := range b.Held {
			a := byID[id]
			overlap := min(a.End, b.End) - b.Complete
			if overlap <= m.AllowedOverlap || storeDropped(m, faults, b.Name, a.Invoke, b.Complete, a.End) {
				continue
			}
			vs = append(vs, Violation{Check: "overlap", Name: b.Name, Ops: []int64{a.ID, b.ID}, From: a.Invoke, To: max(b.Complete, min(a.End, b.End)),
				Msg: fmt.Sprintf("two holders for %v: op %d (worker %d, fence %d) was granted while op %d's holder (worker %d, fence %d) still held it (allowed %v)",
					overlap.Round(time.Millisecond), b.ID, b.Worker, b.Fence, a.ID, a.Worker, a.Fence, m.AllowedOverlap)})
		}
	}
	return vs
}

// checkFences: a grant that returned after another (and was valid when
// it returned) has a greater fence; no fence repeats on a name.
func checkFences(ops []Op) []Violation {
	var vs []Violation
	for name, gs := range grantsByName(ops) {
		seen := map[fencelock.Fence]Op{}
		var last *Op
		for i := range gs {
			g := gs[i]
			if p, dup := seen[g.Fence]; dup {
				vs = append(vs, Violation{Check: "fence", Name: name, Ops: []int64{p.ID, g.ID}, From: p.Invoke, To: g.Complete,
					Msg: fmt.Sprintf("fence %d granted twice: op %d (worker %d) and op %d (worker %d)", g.Fence, p.ID, p.Worker, g.ID, g.Worker)})
				continue
			}
			seen[g.Fence] = g
			if g.ValidUntil <= g.Complete {
				continue // expired before it returned: its place in the order is unknown
			}
			if last != nil && g.Fence < last.Fence {
				vs = append(vs, Violation{Check: "fence", Name: name, Ops: []int64{last.ID, g.ID}, From: last.Invoke, To: g.Complete,
					Msg: fmt.Sprintf("fence went down: op %d (worker %d) got %d after op %d (worker %d) got %d", g.ID, g.Worker, g.Fence, last.ID, last.Worker, last.Fence)})
			}
			last = &gs[i]
		}
	}
	return vs
}

// checkAfterGrant: an Extend or Release that succeeded was invoked
// before any later grant of the name to another lease returned.
func checkAfterGrant(ops []Op) []Violation {
	byID := opIndex(ops)
	grants := grantsByName(ops)
	var vs []Violation
	for _, x := range ops {
		if (x.Kind != OpExtend && x.Kind != OpRelease) || x.Result != "ok" {
			continue
		}
		a := byID[x.Lease]
		for _, b := range grants[x.Name] {
			// b came after a in the store's grant order when its fence is
			// higher (the fence check holds that order to the grants); its
			// reply may come later than a's even when the store granted it
			// first (a grant whose reply a fault delayed), so reply times
			// cannot order them.
			if b.ID != a.ID && b.Fence > a.Fence && b.Complete < x.Invoke {
				vs = append(vs, Violation{Check: "after-grant", Name: x.Name, Ops: []int64{a.ID, b.ID, x.ID}, From: a.Invoke, To: x.Complete,
					Msg: fmt.Sprintf("%s of op %d's lease (worker %d, fence %d) succeeded after op %d (worker %d, fence %d) was granted the name", x.Kind, a.ID, a.Worker, a.Fence, b.ID, b.Worker, b.Fence)})
				break
			}
		}
	}
	return vs
}

// checkAfterDrop: an Extend that succeeded was not sent after an admin
// expire of its name that began after its lease was granted.
func checkAfterDrop(ops []Op, faults []Fault) []Violation {
	byID := opIndex(ops)
	var vs []Violation
	for _, x := range ops {
		if x.Kind != OpExtend || x.Result != "ok" {
			continue
		}
		a := byID[x.Lease]
		for _, f := range faults {
			if f.Kind != "expire" || f.Name != x.Name || strings.Contains(f.Target, "failed") {
				continue
			}
			if a.Complete < f.Start && f.End < x.Invoke {
				vs = append(vs, Violation{Check: "after-drop", Name: x.Name, Ops: []int64{a.ID, x.ID}, From: a.Invoke, To: x.Complete,
					Msg: fmt.Sprintf("extend of op %d's lease (worker %d, fence %d) succeeded after an admin expire of the name at %v dropped it", a.ID, a.Worker, a.Fence, f.Start.Round(time.Millisecond))})
				break
			}
		}
	}
	return vs
}

// checkEndedWaiters: a probe (its Client's TryAcquire right after a
// cancelled wait) refused while no other operation could hold the name
// shows the cancelled waiter left the lock held.
func checkEndedWaiters(m TortureMeta, ops []Op) []Violation {
	var vs []Violation
	for _, p := range ops {
		if p.Kind != OpProbe || p.Result != "refused" {
			continue
		}
		busy := false
		for _, o := range ops {
			if o.Name != p.Name || o.ID == p.ID || o.ID == p.Arg || o.Invoke > p.Complete {
				continue
			}
			switch {
			case o.grant():
				busy = busy || o.End+m.StoreSlack >= p.Invoke
			case o.Kind == OpAcquire || o.Kind == OpAcquireNoWait || o.Kind == OpTry || o.Kind == OpCancelWait || o.Kind == OpProbe:
				// Not granted, but may have held the lock for a moment.
				busy = busy || o.Complete+m.StoreSlack >= p.Invoke
			}
		}
		if !busy {
			vs = append(vs, Violation{Check: "ended-waiter", Name: p.Name, Ops: []int64{p.ID}, From: p.Invoke - m.StoreSlack, To: p.Complete,
				Msg: fmt.Sprintf("worker %d's TryAcquire right after its cancelled wait was refused while no other lease could hold the name", p.Worker)})
		}
	}
	return vs
}

// checkLiveness: every liveness-phase Acquire was granted within
// LiveBound.
func checkLiveness(m TortureMeta, ops []Op) []Violation {
	var vs []Violation
	for _, o := range ops {
		if o.Phase != "liveness" || o.Kind != OpAcquire {
			continue
		}
		took := o.Complete - o.Invoke
		if o.Result != "ok" || took > m.LiveBound {
			vs = append(vs, Violation{Check: "liveness", Name: o.Name, Ops: []int64{o.ID}, From: o.Invoke, To: o.Complete,
				Msg: fmt.Sprintf("after the last fault healed, worker %d's Acquire returned %s after %v (bound %v) %s", o.Worker, o.Result, took.Round(time.Millisecond), m.LiveBound, o.Err)})
		}
	}
	return vs
}

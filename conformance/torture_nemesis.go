package conformance

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/conformance/netfault"
	"github.com/fencelock/fencelock/driver"
)

// plannedFault is one entry of the nemesis's schedule, drawn from the
// seed before the run starts: the same seed and harness give the same
// schedule.
type plannedFault struct {
	At    time.Duration // offset from the run's start
	Kind  string
	Dur   time.Duration // 0: an instant fault (expire, restart)
	Delay time.Duration // latency
	Name  int           // expire: index of the lock name
}

func (p plannedFault) String() string {
	s := fmt.Sprintf("%v %s", p.At.Round(time.Millisecond), p.Kind)
	if p.Dur > 0 {
		s += fmt.Sprintf(" for %v", p.Dur.Round(time.Millisecond))
	}
	if p.Delay > 0 {
		s += fmt.Sprintf(" (%v delay)", p.Delay.Round(time.Millisecond))
	}
	return s
}

// faultKinds is what the harness lets the nemesis do.
func (r *run) faultKinds() []string {
	var k []string
	if r.faults != nil {
		k = append(k, "blackhole", "reset", "latency")
	}
	if _, ok := r.h.(Expirer); ok {
		k = append(k, "expire")
	}
	if _, ok := r.h.(StoreRestarter); ok || r.o.Restart != nil {
		k = append(k, "restart")
	}
	if r.o.Pause != nil && r.o.Resume != nil {
		k = append(k, "pause")
	}
	if r.child != nil {
		k = append(k, "freeze-client")
	}
	return k
}

// schedule draws the run's faults: one at a time, separated by a quiet
// gap, each over before the random phase ends.
func (r *run) schedule() []plannedFault {
	kinds := r.faultKinds()
	if len(kinds) == 0 {
		return nil
	}
	rng := r.rng(0)
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	var plan []plannedFault
	at := time.Duration(0)
	for {
		at += between(r.eff/2, 2*r.eff)
		p := plannedFault{At: at, Kind: kinds[rng.IntN(len(kinds))]}
		switch p.Kind {
		case "blackhole", "reset", "latency", "pause", "freeze-client":
			p.Dur = between(r.eff/2, 3*r.eff)
			if p.Kind == "latency" {
				p.Delay = between(10*time.Millisecond, max(20*time.Millisecond, r.ttl/4))
			}
		case "expire":
			p.Name = rng.IntN(len(r.names))
		}
		if at+p.Dur >= r.o.Duration {
			return plan
		}
		plan = append(plan, p)
		at += p.Dur
	}
}

// nemesis applies the schedule, then heals everything and closes
// r.healed.
func (r *run) nemesis(ctx context.Context) {
	defer close(r.healed)
	plan := r.schedule()
	r.logf("fault schedule (%d): %v", len(plan), plan)
	for _, p := range plan {
		pause(ctx, p.At-r.hist.now())
		if ctx.Err() != nil {
			break
		}
		r.apply(ctx, p)
	}
	if r.faults != nil {
		r.faults.Heal()
	}
}

// apply injects one fault (and heals it after its duration) and records
// it.
func (r *run) apply(ctx context.Context, p plannedFault) {
	f := Fault{Kind: p.Kind, Delay: p.Delay, Start: r.hist.now()}
	switch p.Kind {
	case "blackhole", "reset", "latency":
		mode := map[string]netfault.Mode{"blackhole": netfault.Blackhole, "reset": netfault.Reset, "latency": netfault.Latency}[p.Kind]
		nodes := r.cutSet()
		f.Target = fmt.Sprintf("client %d (%d of %d nodes)", r.hist.Meta.Proxied, len(nodes), r.faults.Nodes())
		r.faults.Cut(mode, p.Delay, nodes...)
		pause(ctx, p.Dur)
		r.faults.Heal()
	case "expire":
		f.Name = r.names[p.Name]
		f.Target = "store"
		key := r.prefix + f.Name
		if err := r.h.(Expirer).Expire(ctx, key); err != nil {
			f.Target = "store (failed: " + err.Error() + ")"
		}
	case "restart":
		f.Target = "store"
		restart := r.o.Restart
		if sr, ok := r.h.(StoreRestarter); ok {
			restart = sr.RestartStore
		}
		if err := restart(ctx); err != nil {
			f.Target = "store (failed: " + err.Error() + ")"
		}
	case "pause":
		f.Target = "server process"
		if err := r.o.Pause(); err != nil {
			f.Target = "server process (failed: " + err.Error() + ")"
			break
		}
		pause(ctx, p.Dur)
		if err := r.o.Resume(); err != nil {
			f.Target = "server process (resume failed: " + err.Error() + ")"
		}
	case "freeze-client":
		// The client process stops where it is (its renewals, its
		// replies in flight) for a drawn duration, often past the TTL;
		// its monotonic clock runs on, so resumed, it finds its local
		// deadlines passed. It starts once the child holds a lease (or
		// after 2×TTL without one): a freeze matters most to a holder.
		r.child.waitHolding(ctx, 2*r.eff)
		f.Start = r.hist.now()
		f.Target = fmt.Sprintf("client %d (process %d)", r.hist.Meta.Child, r.child.pid)
		if err := r.child.freeze(); err != nil {
			f.Target += " (failed: " + err.Error() + ")"
			break
		}
		pause(ctx, p.Dur)
		if err := r.child.thaw(); err != nil {
			f.Target += " (resume failed: " + err.Error() + ")"
		}
	}
	f.End = r.hist.now()
	r.hist.addFault(f)
}

// cutSet: every node, or a majority where the client itself keeps each
// lock on a quorum of independent nodes (Redlock), as the partition
// checks do.
func (r *run) cutSet() []int {
	n := r.faults.Nodes()
	k := n
	if a, ok := r.h.(Administered); ok {
		if _, q := a.Admin().(driver.QuorumAdmin); q && n >= 3 {
			k = n/2 + 1
		}
	}
	nodes := make([]int, k)
	for i := range nodes {
		nodes[i] = i
	}
	return nodes
}

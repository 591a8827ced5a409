package conformance

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/fencelock/fencelock"
)

// worker runs random operations on one Client, its choices drawn from
// its own stream of the run's seed.
type worker struct {
	r      *run
	k      int
	client int
	c      locker
	rng    *rand.Rand
}

// worker k uses the run's Clients in turn; the last worker uses the
// child process's Client where there is one.
func (r *run) worker(k int) *worker {
	if r.child != nil && k == r.o.Workers-1 {
		return &worker{r: r, k: k, client: r.hist.Meta.Child, c: r.child, rng: r.rng(uint64(k) + 1)}
	}
	ci := k % len(r.clients)
	return &worker{r: r, k: k, client: ci, c: clientLocker{r.clients[ci]}, rng: r.rng(uint64(k) + 1)}
}

// run does random steps until the random phase ends, then, once the
// nemesis healed its last fault, the liveness step.
func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil && w.r.hist.now() < w.r.stopAt {
		w.step(ctx)
	}
	// The liveness phase starts when the nemesis healed its last fault
	// and every worker is here, so that they all contend at once.
	if w.r.arrived.Add(1) == int32(w.r.o.Workers) {
		close(w.r.allIn)
	}
	for _, ch := range []chan struct{}{w.r.healed, w.r.allIn} {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
	w.live(ctx)
}

// between returns a random duration in [lo, hi).
func (w *worker) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

// pause waits d or until ctx ends: pacing, not synchronisation.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// step: one attempt to take a random name, and if granted, a hold.
func (w *worker) step(ctx context.Context) {
	r := w.r
	name := r.names[w.rng.IntN(len(r.names))]
	renew := w.rng.IntN(5) != 0 // one hold in five stalls past its TTL
	ao := &fencelock.AcquireOptions{TTL: r.ttl, AutoRenew: fencelock.Bool(renew)}
	kind := OpTry
	var cancelAfter time.Duration
	switch p := w.rng.IntN(100); {
	case p < 35:
		kind, ao.Wait = OpAcquire, w.between(r.eff/5, 2*r.eff)
	case p < 45:
		kind = OpAcquireNoWait
	case p < 80:
	default:
		kind, cancelAfter = OpCancelWait, w.between(0, r.eff)
	}
	op, l := w.acquire(ctx, kind, name, ao, cancelAfter, 0)
	if l == nil && op.Kind == OpCancelWait && op.Result == "ctx" && ctx.Err() == nil {
		// The cancelled waiter must hold nothing: the same Client tries
		// at once.
		op, l = w.acquire(ctx, OpProbe, name, ao, 0, op.ID)
	}
	if l == nil {
		pause(ctx, w.between(0, r.ttl/4))
		return
	}
	w.hold(ctx, name, op.ID, l, renew)
}

// acquire runs one acquisition and records it; on a grant it returns the
// lease, registered in the run's lease table.
// A probe's Arg is the cancelled wait's op.
func (w *worker) acquire(ctx context.Context, kind, name string, ao *fencelock.AcquireOptions, cancelAfter time.Duration, arg int64) (*Op, tortureLease) {
	r := w.r
	octx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	switch kind {
	case OpCancelWait:
		octx, cancel = context.WithTimeout(octx, cancelAfter)
		defer cancel()
	case OpAcquireNoWait:
		// No Wait: only the ctx bounds it.
		octx, cancel = context.WithTimeout(octx, w.between(r.eff, 3*r.eff))
		defer cancel()
	}
	op := &Op{Worker: w.k, Client: w.client, Kind: kind, Name: name, Arg: arg, Invoke: r.hist.now()}
	var l tortureLease
	var err error
	if kind == OpTry || kind == OpProbe {
		l, err = w.c.TryAcquire(octx, name, ao)
	} else {
		l, err = w.c.Acquire(octx, name, ao)
	}
	op.Complete = r.hist.now()
	if err != nil {
		op.Result, op.Err = classify(err), errText(err)
		r.hist.add(op)
		return op, nil
	}
	r.granted(op, l)
	return op, l
}

// granted records a grant: what other holders believed at that moment,
// and, when the lease ends, when its holder stopped believing.
func (r *run) granted(op *Op, l tortureLease) {
	op.Result, op.Fence = "ok", l.Fence()
	op.ValidUntil = r.hist.at(l.ValidUntil())
	op.Held = r.leases.held(op.Name)
	r.hist.add(op)
	id := op.ID
	r.leases.add(op.Name, id, l)
	context.AfterFunc(l.Context(), func() {
		at := min(r.hist.now(), r.hist.at(l.ValidUntil()))
		r.hist.endLease(id, at)
		r.leases.remove(op.Name, id)
	})
}

// hold: a few random actions while holding, maybe a stall past the TTL,
// then Release.
func (w *worker) hold(ctx context.Context, name string, lease int64, l tortureLease, renew bool) {
	r := w.r
	for range 1 + w.rng.IntN(3) {
		switch w.rng.IntN(5) {
		case 0, 1:
			w.rmwClaimFirst(ctx, name, lease, l.Fence())
		case 2:
			w.rmwWriteOnly(ctx, name, lease, l.Fence())
		case 3:
			w.extend(ctx, name, lease, l, r.hist.Meta.MaxTTL)
		case 4:
			w.extend(ctx, name, lease, l, shortTTL(r.caps, r.ttl*3/4))
		}
		pause(ctx, w.between(0, r.ttl/3))
	}
	if !renew {
		// Stall past ValidUntil, then act as if nothing happened: the
		// guard must refuse the stale write.
		op := &Op{Worker: w.k, Client: w.client, Kind: OpStall, Name: name, Lease: lease, Invoke: r.hist.now()}
		pause(ctx, time.Until(l.ValidUntil())+w.between(0, r.ttl/2))
		op.Complete, op.Result = r.hist.now(), "ok"
		r.hist.add(op)
		w.rmwClaimFirst(ctx, name, lease, l.Fence())
	}
	w.release(ctx, name, lease, l)
}

func (w *worker) extend(ctx context.Context, name string, lease int64, l tortureLease, ttl time.Duration) {
	r := w.r
	octx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	op := &Op{Worker: w.k, Client: w.client, Kind: OpExtend, Name: name, Lease: lease, Arg: ttl.Milliseconds(), Invoke: r.hist.now()}
	err := l.Extend(octx, ttl)
	op.Complete, op.Result, op.Err = r.hist.now(), classify(err), errText(err)
	op.ValidUntil = r.hist.at(l.ValidUntil())
	r.hist.add(op)
}

func (w *worker) release(ctx context.Context, name string, lease int64, l tortureLease) {
	r := w.r
	octx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	op := &Op{Worker: w.k, Client: w.client, Kind: OpRelease, Name: name, Lease: lease, Invoke: r.hist.now()}
	r.leases.releasing(name, lease)
	r.hist.endLease(lease, op.Invoke)
	err := l.Release(octx)
	op.Complete, op.Result, op.Err = r.hist.now(), classify(err), errText(err)
	r.hist.add(op)
}

// rmwClaimFirst: claim the register with the fence, then write value+1
// while the claim is ours.
func (w *worker) rmwClaimFirst(ctx context.Context, name string, lease int64, f fencelock.Fence) {
	reg := cfReg(name)
	res := w.r.regs[reg]
	var v int64
	ok := w.regOp(ctx, OpClaim, reg, lease, f, 0, func(ctx context.Context) (int64, error) {
		var err error
		v, err = res.Claim(ctx, f)
		return v, err
	})
	if ok {
		w.regOp(ctx, OpWriteClaimed, reg, lease, f, v+1, func(ctx context.Context) (int64, error) {
			return 0, res.WriteClaimed(ctx, f, v+1)
		})
	}
}

// rmwWriteOnly: an unfenced read, then a write refused only if older
// than the register's fence.
func (w *worker) rmwWriteOnly(ctx context.Context, name string, lease int64, f fencelock.Fence) {
	reg := woReg(name)
	res := w.r.regs[reg]
	var v int64
	ok := w.regOp(ctx, OpRead, reg, lease, 0, 0, func(ctx context.Context) (int64, error) {
		var err error
		v, err = res.Read(ctx)
		return v, err
	})
	if ok {
		w.regOp(ctx, OpWriteIfNotOlder, reg, lease, f, v+1, func(ctx context.Context) (int64, error) {
			return 0, res.WriteIfNotOlder(ctx, f, v+1)
		})
	}
}

// regOp runs and records one register operation; it reports success.
func (w *worker) regOp(ctx context.Context, kind, reg string, lease int64, f fencelock.Fence, arg int64, do func(context.Context) (int64, error)) bool {
	r := w.r
	octx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	if p, ok := w.c.(*childProc); ok {
		p.ping(octx)
	}
	op := &Op{Worker: w.k, Client: w.client, Kind: kind, Name: reg, Lease: lease, Fence: f, Arg: arg, Invoke: r.hist.now()}
	v, err := do(octx)
	op.Complete, op.Value, op.Result, op.Err = r.hist.now(), v, classify(err), errText(err)
	r.hist.add(op)
	return err == nil
}

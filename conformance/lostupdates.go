package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
)

func init() {
	register(check{name: "LostUpdates", run: testLostUpdates, ttls: 60})
}

// Mode is how a lost-update worker protects its write.
type Mode int

const (
	// NoFencing: read, increment, write; the lock is the only protection.
	NoFencing Mode = iota
	// WriteOnly: the write carries the fence and is refused if older than
	// the resource's (guard.Resource.WriteIfNotOlder).
	WriteOnly
	// ClaimFirst: stamp the fence on the resource before reading, write
	// only while the stamp is still ours (guard.Resource.Claim, WriteClaimed).
	ClaimFirst
)

// Modes returns every Mode, in table order (a new slice each call).
func Modes() []Mode { return []Mode{NoFencing, WriteOnly, ClaimFirst} }

func (m Mode) String() string {
	switch m {
	case NoFencing:
		return "no fencing"
	case WriteOnly:
		return "write-only"
	case ClaimFirst:
		return "claim-first"
	}
	return "unknown"
}

// LostUpdatesConfig sizes the lost-update experiment.
type LostUpdatesConfig struct {
	Name      string        // lock name
	Sections  int           // critical sections in all (increments attempted)
	Workers   int           // concurrent workers
	StallRate float64       // share of sections that stall past the TTL, spread evenly
	TTL       time.Duration // lease TTL (auto-renew off, as a stalled worker cannot renew)
	Stall     time.Duration // stall length; default 1.5×TTL
	// Progress, if set, is called now and then with sections done so far.
	Progress func(done, total int)
}

// LostUpdatesResult is one run's outcome.
type LostUpdatesResult struct {
	Mode     Mode
	Sections int   // sections run
	Stalled  int   // sections that stalled past the TTL
	Accepted int   // writes the resource accepted
	Rejected int   // writes (or claims) the guard refused: known failures, safe to retry
	Final    int64 // increments visible in the resource at the end
	Lost     int   // accepted writes whose increment is not visible: Accepted − Final
	Elapsed  time.Duration
}

// stalls reports whether section i (0-based) stalls at the given rate:
// round(n·rate) of n sections, evenly spread and centred (never all at the
// end, where no other worker is left to overwrite).
func stalls(i int, rate float64) bool {
	return int(float64(i+1)*rate+0.5) > int(float64(i)*rate+0.5)
}

// LostUpdates runs the experiment: cfg.Workers workers, using lockers in
// turn, increment res once per section under the lock named cfg.Name; a
// stalling section reads, sleeps cfg.Stall with its lease expired, then
// writes. It returns how many increments were lost.
func LostUpdates(ctx context.Context, lockers []fencelock.Locker, res guard.Resource, mode Mode, cfg LostUpdatesConfig) (LostUpdatesResult, error) {
	r := LostUpdatesResult{Mode: mode, Sections: cfg.Sections}
	if cfg.Workers <= 0 || cfg.Sections <= 0 || len(lockers) == 0 || cfg.TTL <= 0 {
		return r, fmt.Errorf("%w: lost updates: need workers, sections, lockers and a TTL", fencelock.ErrInvalid)
	}
	if cfg.Stall <= 0 {
		cfg.Stall = cfg.TTL + cfg.TTL/2
	}
	initial, err := res.Read(ctx)
	if err != nil {
		return r, err
	}
	start := time.Now()
	var next, done, stalled, accepted, rejected atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, cfg.Workers)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := range cfg.Workers {
		lk := lockers[w%len(lockers)]
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.Sections || ctx.Err() != nil {
					return
				}
				stall := stalls(i, cfg.StallRate)
				ok, err := section(ctx, lk, res, mode, cfg, stall)
				if err != nil {
					errc <- err
					cancel()
					return
				}
				if stall {
					stalled.Add(1)
				}
				if ok {
					accepted.Add(1)
				} else {
					rejected.Add(1)
				}
				if d := int(done.Add(1)); cfg.Progress != nil && d%100 == 0 {
					cfg.Progress(d, cfg.Sections)
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return r, err
	}
	final, err := res.Read(ctx)
	if err != nil {
		return r, err
	}
	r.Stalled, r.Accepted, r.Rejected = int(stalled.Load()), int(accepted.Load()), int(rejected.Load())
	r.Final = final - initial
	r.Lost = r.Accepted - int(r.Final)
	r.Elapsed = time.Since(start)
	return r, nil
}

// section runs one critical section; ok reports whether its write landed.
func section(ctx context.Context, lk fencelock.Locker, res guard.Resource, mode Mode, cfg LostUpdatesConfig, stall bool) (ok bool, err error) {
	var pause time.Duration
	if stall {
		pause = cfg.Stall
	}
	return guardedIncrement(ctx, lk, cfg.Name, cfg.TTL, res, mode, pause)
}

// guardedIncrement takes the lock (auto-renew off), reads (or claims)
// res, pauses for pause, and writes the increment as mode says. ok
// reports whether the write landed; a write the guard refused is not an
// error.
func guardedIncrement(ctx context.Context, lk fencelock.Locker, name string, ttl time.Duration, res guard.Resource, mode Mode, pause time.Duration) (ok bool, err error) {
	l, err := lk.Acquire(ctx, name, &fencelock.AcquireOptions{TTL: ttl, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		return false, err
	}
	defer func() {
		if rerr := l.Release(ctx); rerr != nil && !errors.Is(rerr, fencelock.ErrLeaseLost) && err == nil {
			err = rerr
		}
	}()
	// A stalled worker does not look at its lease: that is the hazard.
	wait := func() { sleepCtx(ctx, pause) }
	f := l.Fence()
	var v int64
	switch mode {
	case NoFencing:
		if v, err = res.Read(ctx); err != nil {
			return false, err
		}
		wait()
		return true, res.Write(ctx, v+1)
	case WriteOnly:
		if v, err = res.Read(ctx); err != nil {
			return false, err
		}
		wait()
		err = res.WriteIfNotOlder(ctx, f, v+1)
	case ClaimFirst:
		if v, err = res.Claim(ctx, f); err == nil {
			wait()
			err = res.WriteClaimed(ctx, f, v+1)
		}
	}
	if errors.Is(err, guard.ErrStale) {
		return false, nil
	}
	return err == nil, err
}

// testLostUpdates: with stalls past the TTL, the unfenced counter loses
// updates (the check has teeth) and claim-first loses none.
func testLostUpdates(t TB, e *env) {
	lockers := []fencelock.Locker{e.client(), e.client(), e.client(), e.client()}
	// Stalls outlast what the store granted, not only what was asked.
	cfg := LostUpdatesConfig{Name: e.name("counter"), Sections: 40, Workers: 4, StallRate: 0.1, TTL: e.ttl, Stall: e.effTTL() + e.effTTL()/2}
	for _, m := range Modes() {
		e.waiting("the lost-update experiment, " + m.String())
		var res guard.Counter
		r, err := LostUpdates(e.ctx, lockers, &res, m, cfg)
		mustNil(t, err, "lost updates, "+m.String())
		t.Logf("%-11s sections %d stalled %d accepted %d rejected %d final %d lost %d (%v)",
			m, r.Sections, r.Stalled, r.Accepted, r.Rejected, r.Final, r.Lost, r.Elapsed.Round(time.Millisecond))
		switch m {
		case NoFencing:
			if r.Lost == 0 {
				t.Errorf("no fencing lost nothing with %d stalls past the TTL: the experiment has no teeth", r.Stalled)
			}
		case ClaimFirst:
			if r.Lost != 0 {
				t.Errorf("claim-first lost %d updates; want 0", r.Lost)
			}
			if r.Rejected == 0 {
				t.Errorf("claim-first rejected no stale write despite %d stalls", r.Stalled)
			}
		}
		if r.Accepted+r.Rejected != r.Sections {
			t.Errorf("%s: accepted %d + rejected %d != sections %d", m, r.Accepted, r.Rejected, r.Sections)
		}
	}
}

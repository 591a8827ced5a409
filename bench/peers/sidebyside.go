package peers

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"time"
)

// Turn sizes of the side-by-side measures: how many acquire+release pairs
// (or hand-offs) one implementation runs before the next implementation
// of its store takes a turn.
//
// A chunk of 300 pairs lasts 30–50 ms on Redis, short enough for one
// scheduler hiccup or a shift in the loopback's speed to land on one
// implementation only: two full runs once put fencelock over redislock
// at 0.80× and 1.49×, with the rounds' ranges overlapping. Taking turns
// every few milliseconds (a hand-off turn lasts about 4 × the settle
// time) puts such drift on every implementation of the store alike.
const (
	uncontendedBatch = 20
	handoffBatch     = 4
)

// turn is one implementation's part in a side-by-side measure: step runs
// k more operations; err is the first failure, after which it takes no
// more turns.
type turn struct {
	step func(ctx context.Context, k int) error
	err  error
}

// interleave runs n operations of each of ts, in turns of batch, the
// first turn rotating from batch to batch, all within timeout.
func interleave(ctx context.Context, timeout time.Duration, ts []*turn, n, batch int) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for b, done := 0, 0; done < n; b, done = b+1, done+batch {
		k := min(batch, n-done)
		for j := range ts {
			t := ts[(b+j)%len(ts)]
			if t.err == nil {
				t.err = t.step(ctx, k)
			}
		}
	}
}

// sideBySide runs a round's uncontended and hand-off measures of every
// runnable implementation (all its clients open), the implementations of
// one store taking turns. It returns each implementation's sample (nil:
// not runnable, or a measure failed; the error is recorded in runs).
func sideBySide(ctx context.Context, env *Env, cfg Config, round int, runs []*implRun) []sample {
	out := make([]sample, len(env.Impls))
	for _, idx := range runnableByStore(env, cfg, runs) {
		unc := make([]*turn, len(idx))
		hand := make([]*turn, len(idx))
		for j, i := range idx {
			key, cs := keyBase(env.Impls[i].ID, round), runs[i].clients
			out[i] = sample{}
			unc[j] = uncontendedTurn(cs[0], key+"-u", cfg.Counts.Uncontended, out[i])
			hand[j] = handoffTurn(cs[0], cs[1], key+"-h", cfg.Counts.Handoffs, cfg.Counts.Settle, out[i])
		}
		interleave(ctx, cfg.ChunkTimeout, unc, cfg.Counts.Uncontended, uncontendedBatch)
		interleave(ctx, cfg.ChunkTimeout, hand, cfg.Counts.Handoffs, handoffBatch)
		for j, i := range idx {
			if err := cmp.Or(unc[j].err, hand[j].err); err != nil {
				runs[i].errs = append(runs[i].errs, fmt.Sprintf("round %d: %v", round, err))
				cfg.logf("round %d %-30s ERROR %v", round, env.Impls[i].ID, err)
				out[i] = nil
			}
		}
	}
	return out
}

// uncontendedTurn times acquire+release pairs on one client and counts
// the process's heap allocations over them; after the last of n pairs it
// writes p50, p99 and allocations per pair to s.
func uncontendedTurn(l Lock, key string, n int, s sample) *turn {
	lat := make([]time.Duration, 0, n)
	var mallocs uint64
	return &turn{step: func(ctx context.Context, k int) error {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range k {
			t0 := time.Now()
			u, err := acquire(ctx, l, key)
			if err != nil {
				return fmt.Errorf("uncontended acquire: %w", err)
			}
			if err := u(ctx); err != nil {
				return fmt.Errorf("uncontended release: %w", err)
			}
			lat = append(lat, time.Since(t0))
		}
		runtime.ReadMemStats(&m1)
		mallocs += m1.Mallocs - m0.Mallocs
		if len(lat) == n {
			s[MUncontP50] = us(pct(lat, 0.5))
			s[MUncontP99] = us(pct(lat, 0.99))
			s[MAllocs] = float64(mallocs) / float64(n)
		}
		return nil
	}}
}

// handoffTurn times hand-offs: the holder's release call starts → the
// blocked waiter (another client) holds; after the last of n it writes
// p50 and p99 to s.
func handoffTurn(holder, waiter Lock, key string, n int, settle time.Duration, s sample) *turn {
	lat := make([]time.Duration, 0, n)
	return &turn{step: func(ctx context.Context, k int) error {
		for range k {
			d, err := handoff(ctx, holder, waiter, key, settle)
			if err != nil {
				return fmt.Errorf("hand-off: %w", err)
			}
			lat = append(lat, d)
		}
		if len(lat) == n {
			s[MHandoffP50] = us(pct(lat, 0.5))
			s[MHandoffP99] = us(pct(lat, 0.99))
		}
		return nil
	}}
}

// handoff times one hand-off: holder takes key, waiter blocks on it, and
// holder releases; it returns the time from the release call to the
// waiter holding.
func handoff(ctx context.Context, holder, waiter Lock, key string, settle time.Duration) (time.Duration, error) {
	u, err := holder.Wait(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("holder: %w", err)
	}
	ch := make(chan grant, 1)
	go func() {
		w, err := waiter.Wait(ctx, key)
		ch <- grant{w, time.Now(), err}
	}()
	time.Sleep(settle) // no signal says a waiter is blocked in the store
	t0 := time.Now()
	err = u(ctx)
	g := <-ch
	if err != nil || g.err != nil {
		if g.err == nil {
			_ = g.u(ctx)
		}
		return 0, fmt.Errorf("release %v, waiter %v", err, g.err)
	}
	if err := g.u(ctx); err != nil {
		return 0, fmt.Errorf("waiter release: %w", err)
	}
	return g.at.Sub(t0), nil
}

// runnableByStore groups the indexes of env's runnable implementations
// (all their clients open) by store, stores and implementations in env's
// order.
func runnableByStore(env *Env, cfg Config, runs []*implRun) [][]int {
	var groups [][]int
	at := map[string]int{}
	for i, im := range env.Impls {
		if len(runs[i].clients) != cfg.Counts.Workers+1 {
			continue
		}
		g, ok := at[im.Store]
		if !ok {
			g = len(groups)
			at[im.Store] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

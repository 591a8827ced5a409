package peers

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// uncontendedBatch is how many acquire+release pairs one implementation
// runs before the next implementation of its store takes a turn.
//
// A chunk of 300 pairs lasts 30–50 ms on Redis, short enough for one
// scheduler hiccup or a shift in the loopback's speed to land on one
// implementation only: two full runs once put fencelock over redislock
// at 0.80× and 1.49×, with the rounds' ranges overlapping. Taking turns
// every few milliseconds puts such drift on every implementation of the
// store alike.
const uncontendedBatch = 20

// uncontendedRun is one implementation's uncontended measure in a round.
type uncontendedRun struct {
	l       Lock
	key     string
	lat     []time.Duration
	mallocs uint64
	err     error
}

// uncontendedRound measures acquire+release on every runnable
// implementation (all its clients open), interleaved by store: the
// implementations of one store take turns in batches of
// uncontendedBatch pairs, the first turn rotating from batch to batch.
// It returns each implementation's sample (nil: not runnable or failed,
// with the error recorded in runs).
func uncontendedRound(ctx context.Context, env *Env, cfg Config, round int, runs []*implRun) []sample {
	n := cfg.Counts.Uncontended
	byStore := map[string][]int{}
	var stores []string
	for i, im := range env.Impls {
		if len(runs[i].clients) != cfg.Counts.Workers+1 {
			continue
		}
		if _, ok := byStore[im.Store]; !ok {
			stores = append(stores, im.Store)
		}
		byStore[im.Store] = append(byStore[im.Store], i)
	}
	out := make([]sample, len(env.Impls))
	for _, st := range stores {
		idx := byStore[st]
		turns := make([]*uncontendedRun, len(idx))
		for j, i := range idx {
			turns[j] = &uncontendedRun{l: runs[i].clients[0], key: keyBase(env.Impls[i].ID, round) + "-u", lat: make([]time.Duration, 0, n)}
		}
		interleave(ctx, cfg.ChunkTimeout, turns, n)
		for j, i := range idx {
			if err := turns[j].err; err != nil {
				runs[i].errs = append(runs[i].errs, fmt.Sprintf("round %d: uncontended: %v", round, err))
				cfg.logf("round %d %-30s ERROR uncontended: %v", round, env.Impls[i].ID, err)
				continue
			}
			out[i] = turns[j].sample()
		}
	}
	return out
}

// interleave runs n pairs on each of us, in turns of uncontendedBatch
// pairs, within timeout; a run that fails stops taking turns.
func interleave(ctx context.Context, timeout time.Duration, us []*uncontendedRun, n int) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for b, done := 0, 0; done < n; b, done = b+1, done+uncontendedBatch {
		k := min(uncontendedBatch, n-done)
		for j := range us {
			u := us[(b+j)%len(us)]
			if u.err == nil {
				u.err = u.batch(ctx, k)
			}
		}
	}
}

// batch times k acquire+release pairs and counts the process's heap
// allocations over them.
func (u *uncontendedRun) batch(ctx context.Context, k int) error {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range k {
		t0 := time.Now()
		un, err := acquire(ctx, u.l, u.key)
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		if err := un(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		u.lat = append(u.lat, time.Since(t0))
	}
	runtime.ReadMemStats(&m1)
	u.mallocs += m1.Mallocs - m0.Mallocs
	return nil
}

// sample is the run's metrics: p50 and p99 latency, allocations per pair.
func (u *uncontendedRun) sample() sample {
	s := sample{}
	s[MUncontP50] = us(pct(u.lat, 0.5))
	s[MUncontP99] = us(pct(u.lat, 0.99))
	s[MAllocs] = float64(u.mallocs) / float64(max(len(u.lat), 1))
	return s
}

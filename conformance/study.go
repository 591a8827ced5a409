package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
)

// StudyConfig is the protocol of the lost-update study this project grew
// from, which differs from LostUpdates: each section does work while it
// holds the lock, a stall may be drawn from a range, and a write the guard
// rejects is redone (the worker re-acquires, re-reads and writes again)
// until it lands, so lost = sections − final value.
type StudyConfig struct {
	Name      string        // lock name
	Sections  int           // critical sections (increments) in all
	Workers   int           // concurrent workers, each on its own Locker in turn
	StallRate float64       // share of sections whose first attempt stalls after reading
	TTL       time.Duration // lease TTL; auto-renew off (a stalled worker cannot renew)
	Work      time.Duration // work between read and write, in every attempt
	StallMin  time.Duration // stall length, drawn uniformly from [StallMin, StallMax]
	StallMax  time.Duration
	// Progress, if set, is called now and then with sections done so far.
	Progress func(done, total int)
}

// The study's protocols (see docs/comparison.md for its numbers), as
// functions so that no caller changes another's copy.

// StudyProfile: 8 workers, one row, TTL 200 ms, 5 ms of work, a share of
// sections stalling 300 ms (1.5 × TTL) after reading; 10,000 sections.
func StudyProfile() StudyConfig {
	return StudyConfig{Sections: 10000, Workers: 8, TTL: 200 * time.Millisecond, Work: 5 * time.Millisecond, StallMin: 300 * time.Millisecond, StallMax: 300 * time.Millisecond}
}

// OverlapProfile: overlaps made common: 100 ms of work (half the TTL), 5 %
// of sections stalling 100–300 ms; 2,000 sections.
func OverlapProfile() StudyConfig {
	return StudyConfig{Sections: 2000, Workers: 8, StallRate: 0.05, TTL: 200 * time.Millisecond, Work: 100 * time.Millisecond, StallMin: 100 * time.Millisecond, StallMax: 300 * time.Millisecond}
}

// StudyResult is one run of the study protocol.
type StudyResult struct {
	Mode     Mode
	Sections int   // sections completed (each ends with an accepted write)
	Stalled  int   // sections whose first attempt stalled
	Rejected int   // writes or claims the guard refused (each then redone)
	Final    int64 // increments visible in the resource at the end
	Lost     int   // Sections − Final
	Elapsed  time.Duration
}

// Study runs the study protocol once on res in the given mode.
func Study(ctx context.Context, lockers []fencelock.Locker, res guard.Resource, mode Mode, cfg StudyConfig) (StudyResult, error) {
	r := StudyResult{Mode: mode, Sections: cfg.Sections}
	switch {
	case cfg.Workers <= 0 || cfg.Sections <= 0 || len(lockers) == 0 || cfg.TTL <= 0:
		return r, fmt.Errorf("%w: study: need workers, sections, lockers and a TTL", fencelock.ErrInvalid)
	case cfg.Work < 0 || cfg.StallMin < 0 || cfg.StallMax < cfg.StallMin:
		return r, fmt.Errorf("%w: study: want 0 ≤ Work and 0 ≤ StallMin ≤ StallMax", fencelock.ErrInvalid)
	}
	initial, err := res.Read(ctx)
	if err != nil {
		return r, err
	}
	start := time.Now()
	var next, done, stalled, rejected atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, cfg.Workers) // one send per worker at most
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
				var stall time.Duration
				if stalls(i, cfg.StallRate) {
					stalled.Add(1)
					stall = cfg.StallMin
					if span := cfg.StallMax - cfg.StallMin; span > 0 {
						stall += rand.N(span + 1)
					}
				}
				// Redo until the write lands; only the first attempt stalls.
				for attempt := 0; ; attempt++ {
					ok, err := guardedIncrement(ctx, lk, cfg.Name, cfg.TTL, res, mode, stall+cfg.Work)
					if err != nil {
						errc <- err
						cancel()
						return
					}
					if ok {
						break
					}
					rejected.Add(1)
					stall = 0
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
	r.Stalled, r.Rejected = int(stalled.Load()), int(rejected.Load())
	r.Final = final - initial
	r.Lost = r.Sections - int(r.Final)
	r.Elapsed = time.Since(start)
	return r, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Spread summarises repeated runs: the median and the range.
type Spread struct{ Median, Min, Max int }

// SpreadOf returns the median (the lower middle for an even count) and
// range of xs; the zero Spread for none.
func SpreadOf(xs []int) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Spread{Median: s[(len(s)-1)/2], Min: s[0], Max: s[len(s)-1]}
}

func (s Spread) String() string {
	if s.Min == s.Max {
		return fmt.Sprint(s.Median)
	}
	return fmt.Sprintf("%d (%d–%d)", s.Median, s.Min, s.Max)
}

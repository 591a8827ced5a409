package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// RunBenchmarks runs the shared benchmarks against the store newHarness
// makes: uncontended TryAcquire+Release, hand-off latency (release →
// blocked Acquire returns; median and p99 reported), and 8-way contended
// throughput with the worst wait reported.
func RunBenchmarks(b *testing.B, newHarness HarnessMaker) {
	bench := func(name string, f func(b *testing.B, e *env)) {
		b.Run(name, func(b *testing.B) {
			ctx := b.Context()
			h, err := newHarness(ctx, b)
			if err != nil {
				b.Fatalf("harness: %v", err)
			}
			b.Cleanup(h.Close)
			f(b, newEnv(ctx, b, h, 0))
		})
	}
	bench("AcquireRelease", benchAcquireRelease)
	bench("HandOff", benchHandOff)
	bench("Contended8", benchContended)
}

func benchAcquireRelease(b *testing.B, e *env) {
	c := e.client()
	name := e.name("x")
	o := opts(longTTL, false)
	for b.Loop() {
		l, err := c.TryAcquire(e.ctx, name, o)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(e.ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// HandOffLatencies measures n hand-offs between two clients: the time from
// the holder's Release call to the blocked Acquire's return. Used by the
// benchmarks and the CLI's bench.
func HandOffLatencies(ctx context.Context, a, w fencelock.Locker, name string, n int) ([]time.Duration, error) {
	o := &fencelock.AcquireOptions{TTL: longTTL, AutoRenew: fencelock.Bool(false)}
	lat := make([]time.Duration, 0, n)
	for range n {
		l, err := a.Acquire(ctx, name, o)
		if err != nil {
			return lat, err
		}
		type res struct {
			l   *fencelock.Lease
			err error
			at  time.Time
		}
		got := make(chan res, 1)
		go func() {
			l2, err := w.Acquire(ctx, name, o)
			got <- res{l2, err, time.Now()}
		}()
		if err := awaitQueued(ctx, a, name); err != nil {
			return lat, err
		}
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			return lat, err
		}
		r := <-got
		if r.err != nil {
			return lat, r.err
		}
		lat = append(lat, r.at.Sub(released))
		if err := r.l.Release(ctx); err != nil {
			return lat, err
		}
	}
	return lat, nil
}

// inspector is what a Locker offers when it can count a lock's waiters
// (a *fencelock.Client whose backend reports them).
type inspector interface {
	Capabilities() fencelock.Capabilities
	Inspect(ctx context.Context, name string) (fencelock.LockInfo, error)
}

// awaitQueued returns once the store shows a waiter queued on name, where
// l can tell (Capabilities.Inspect.Waiters), so that a hand-off is timed
// from a Release that finds the waiter already blocked. Elsewhere it gives
// the waiter 2ms to block: a store that cannot count its waiters cannot
// say when one is queued.
func awaitQueued(ctx context.Context, l fencelock.Locker, name string) error {
	in, ok := l.(inspector)
	if !ok || !in.Capabilities().Inspect.Waiters {
		time.Sleep(2 * time.Millisecond)
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := in.Inspect(ctx, name)
		if err != nil {
			return err
		}
		if info.Waiters > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hand-off: no waiter queued on %q within 5s", name)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// Percentile returns the p-th percentile (0..1) of ds (sorted in place).
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(p * float64(len(ds)-1))
	return ds[i]
}

func benchHandOff(b *testing.B, e *env) {
	a, w := e.client(), e.client()
	var all []time.Duration
	for b.Loop() {
		lat, err := HandOffLatencies(e.ctx, a, w, e.name("x"), 1)
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, lat...)
	}
	b.ReportMetric(float64(Percentile(all, 0.5).Microseconds()), "handoff-p50-µs")
	b.ReportMetric(float64(Percentile(all, 0.99).Microseconds()), "handoff-p99-µs")
}

// ContendedResult is a contention run's outcome.
type ContendedResult struct {
	Sections  int
	Elapsed   time.Duration
	WaitP50   time.Duration
	WaitP99   time.Duration
	WaitMax   time.Duration
	PerWorker []int // sections each worker completed
}

// Contended runs workers goroutines, spread over lockers, each taking and
// releasing one lock until d has passed; it reports throughput and waits.
func Contended(ctx context.Context, lockers []fencelock.Locker, name string, workers int, d time.Duration) (ContendedResult, error) {
	var mu sync.Mutex
	var waits []time.Duration
	per := make([]int, workers)
	var firstErr error
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	o := &fencelock.AcquireOptions{TTL: longTTL, AutoRenew: fencelock.Bool(false)}
	for w := range workers {
		lk := lockers[w%len(lockers)]
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(stop) {
				t0 := time.Now()
				l, err := lk.Acquire(ctx, name, o)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
				per[w]++
				if err := l.Release(ctx); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			waits = append(waits, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	r := ContendedResult{Sections: len(waits), Elapsed: time.Since(start), PerWorker: per}
	r.WaitP50, r.WaitP99, r.WaitMax = Percentile(waits, 0.5), Percentile(waits, 0.99), Percentile(waits, 1)
	return r, firstErr
}

func benchContended(b *testing.B, e *env) {
	lockers := []fencelock.Locker{e.client(), e.client()}
	var total ContendedResult
	for b.Loop() {
		r, err := Contended(e.ctx, lockers, e.name("x"), 8, 200*time.Millisecond)
		if err != nil {
			b.Fatal(err)
		}
		total.Sections += r.Sections
		total.Elapsed += r.Elapsed
		total.WaitMax = max(total.WaitMax, r.WaitMax)
	}
	b.ReportMetric(float64(total.Sections)/total.Elapsed.Seconds(), "sections/s")
	b.ReportMetric(float64(total.WaitMax.Milliseconds()), "max-wait-ms")
}

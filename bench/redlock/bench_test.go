package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// The benchmarks run fencelock's Redlock (opened by URL, with defaults,
// fenced) and redsync's Redlock (unfenced) on the same five primaries,
// interleaved so that drift in machine load hits both alike:
//
//	cd bench && go test -run XXX -bench . -benchtime 20x ./redlock/
//
// Each benchmark runs on primaries without persistence ("mem") and with
// appendonly yes + appendfsync always ("fsync").

var serverKinds = []struct {
	name string
	opts *testserver.RedisNodesOptions
}{
	{"mem", nil},
	{"fsync", &testserver.RedisNodesOptions{AppendOnly: true}},
}

func p50(d []time.Duration) time.Duration { return conformance.Percentile(d, 0.5) }

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// BenchmarkAcquireRelease: uncontended acquire+release, blocks of 20 of
// each per iteration; p50 of each and the ratio.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, k := range serverKinds {
		b.Run(k.name, func(b *testing.B) {
			m := primaries(b, 5, k.opts)
			ctx := b.Context()
			fl := openFencelock(b, m)
			rs := newRedsync(b, m)
			o := &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)}
			var fd, rd []time.Duration
			for b.Loop() {
				for range 20 {
					t0 := time.Now()
					l, err := fl.TryAcquire(ctx, "bench-fencelock", o)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Release(ctx); err != nil {
						b.Fatal(err)
					}
					fd = append(fd, time.Since(t0))
				}
				for range 20 {
					mu := rs.NewMutex("bench-redsync", redsync.WithExpiry(30*time.Second), redsync.WithTries(1))
					t0 := time.Now()
					if err := mu.TryLockContext(ctx); err != nil {
						b.Fatal(err)
					}
					if ok, err := mu.UnlockContext(ctx); !ok || err != nil {
						b.Fatal(ok, err)
					}
					rd = append(rd, time.Since(t0))
				}
			}
			b.ReportMetric(us(p50(fd)), "fencelock-p50-µs")
			b.ReportMetric(us(p50(rd)), "redsync-p50-µs")
			b.ReportMetric(float64(p50(fd))/float64(p50(rd)), "ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// redsyncHandOff measures one redsync hand-off: from the holder's Unlock
// call to the blocked LockContext's return, with redsync's default retry
// delays (its waiters poll).
func redsyncHandOff(ctx context.Context, rs *redsync.Redsync, name string) (time.Duration, error) {
	h := rs.NewMutex(name, redsync.WithExpiry(30*time.Second))
	if err := h.LockContext(ctx); err != nil {
		return 0, err
	}
	w := rs.NewMutex(name, redsync.WithExpiry(30*time.Second))
	got := make(chan time.Time, 1)
	errc := make(chan error, 1)
	go func() {
		if err := w.LockContext(ctx); err != nil {
			errc <- err
			return
		}
		got <- time.Now()
	}()
	time.Sleep(2 * time.Millisecond) // let the waiter block, as HandOffLatencies does
	released := time.Now()
	if ok, err := h.UnlockContext(ctx); !ok || err != nil {
		return 0, fmt.Errorf("unlock: %v %w", ok, err)
	}
	select {
	case at := <-got:
		_, err := w.UnlockContext(ctx)
		return at.Sub(released), err
	case err := <-errc:
		return 0, err
	}
}

// BenchmarkHandOff: release → the blocked acquirer holds; one of each per
// iteration.
func BenchmarkHandOff(b *testing.B) {
	for _, k := range serverKinds {
		b.Run(k.name, func(b *testing.B) {
			m := primaries(b, 5, k.opts)
			ctx := b.Context()
			a, w := openFencelock(b, m), openFencelock(b, m)
			rs := newRedsync(b, m)
			var fd, rd []time.Duration
			for b.Loop() {
				lat, err := conformance.HandOffLatencies(ctx, a, w, "bench-handoff-fencelock", 1)
				if err != nil {
					b.Fatal(err)
				}
				fd = append(fd, lat...)
				d, err := redsyncHandOff(ctx, rs, "bench-handoff-redsync")
				if err != nil {
					b.Fatal(err)
				}
				rd = append(rd, d)
			}
			b.ReportMetric(us(p50(fd)), "fencelock-p50-µs")
			b.ReportMetric(us(p50(rd)), "redsync-p50-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// contendedResult is one contention run.
type contendedResult struct {
	rate     float64 // sections per second
	worst    time.Duration
	min, max int // sections per worker
}

func (r contendedResult) String() string {
	return fmt.Sprintf("%.0f/s, worst wait %v, per worker %d–%d", r.rate, r.worst.Round(time.Millisecond), r.min, r.max)
}

func summarize(c conformance.ContendedResult) contendedResult {
	return contendedResult{
		rate:  float64(c.Sections) / c.Elapsed.Seconds(),
		worst: c.WaitMax,
		min:   slices.Min(c.PerWorker),
		max:   slices.Max(c.PerWorker),
	}
}

// redsyncContended is conformance.Contended for redsync: workers each
// with their own Mutex, taking and releasing one lock until d has passed,
// with redsync's default retries (32 tries, 50–250ms apart).
func redsyncContended(ctx context.Context, rs *redsync.Redsync, name string, workers int, d time.Duration) (conformance.ContendedResult, error) {
	var mu sync.Mutex
	var waits []time.Duration
	per := make([]int, workers)
	var firstErr error
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(stop) {
				m := rs.NewMutex(name, redsync.WithExpiry(30*time.Second))
				t0 := time.Now()
				if err := m.LockContext(ctx); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
				per[w]++
				if _, err := m.UnlockContext(ctx); err != nil {
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
	r := conformance.ContendedResult{Sections: len(waits), Elapsed: time.Since(start), PerWorker: per}
	r.WaitP50, r.WaitP99, r.WaitMax = conformance.Percentile(waits, 0.5), conformance.Percentile(waits, 0.99), conformance.Percentile(waits, 1)
	return r, firstErr
}

// BenchmarkContended8: 8 workers on one lock for 1s each per iteration —
// fencelock's on 2 clients (as `fencelock bench` runs them), redsync's
// each with its own Mutex — throughput, worst wait, fairness.
func BenchmarkContended8(b *testing.B) {
	for _, k := range serverKinds {
		b.Run(k.name, func(b *testing.B) {
			m := primaries(b, 5, k.opts)
			ctx := b.Context()
			lockers := []fencelock.Locker{openFencelock(b, m), openFencelock(b, m)}
			rs := newRedsync(b, m)
			var fs, rr []contendedResult
			for b.Loop() {
				f, err := conformance.Contended(ctx, lockers, "bench-contended-fencelock", 8, time.Second)
				if err != nil {
					b.Fatal(err)
				}
				fs = append(fs, summarize(f))
				r, err := redsyncContended(ctx, rs, "bench-contended-redsync", 8, time.Second)
				if err != nil {
					b.Fatal(err)
				}
				rr = append(rr, summarize(r))
			}
			med := func(rs []contendedResult) contendedResult {
				s := slices.Clone(rs)
				slices.SortFunc(s, func(x, y contendedResult) int { return int(x.rate - y.rate) })
				return s[len(s)/2]
			}
			worst := func(rs []contendedResult) time.Duration {
				var w time.Duration
				for _, r := range rs {
					w = max(w, r.worst)
				}
				return w
			}
			b.Logf("fencelock: median run %v; worst wait over all runs %v", med(fs), worst(fs).Round(time.Millisecond))
			b.Logf("redsync:   median run %v; worst wait over all runs %v", med(rr), worst(rr).Round(time.Millisecond))
			b.ReportMetric(med(fs).rate, "fencelock-sections/s")
			b.ReportMetric(med(rr).rate, "redsync-sections/s")
			b.ReportMetric(float64(worst(fs).Milliseconds()), "fencelock-max-wait-ms")
			b.ReportMetric(float64(worst(rr).Milliseconds()), "redsync-max-wait-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

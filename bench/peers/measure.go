package peers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Counts sizes one chunk of measures (one implementation, one round).
type Counts struct {
	Uncontended int           `json:"uncontended"`   // acquire+release pairs timed
	Handoffs    int           `json:"handoffs"`      // hand-offs timed
	Drains      int           `json:"drains"`        // 8-waiter drains timed (the median is kept)
	Workers     int           `json:"workers"`       // waiters drained and workers contending
	Contention  time.Duration `json:"contention_ns"` // length of the contention run
	Settle      time.Duration `json:"settle_ns"`     // time given waiters to block before a release
	Floor       int           `json:"floor"`         // floor operations timed
}

// sample is one chunk's raw measures, before the median over rounds.
type sample map[string]float64

// Metric names (the JSON keys of Impl.Metrics).
const (
	MUncontP50    = "acquire_release_p50_us"
	MUncontP99    = "acquire_release_p99_us"
	MAllocs       = "allocs_per_op"
	MHandoffP50   = "handoff_p50_us"
	MHandoffP99   = "handoff_p99_us"
	MDrain        = "drain8_ms"
	MThroughput   = "contended_per_s"
	MWorstWait    = "contended_worst_wait_ms"
	MCutoffReturn = "contended_cutoff_return_ms"
	MWorkerMin    = "contended_worker_min"
	MWorkerMax    = "contended_worker_max"
	MWorkerRatio  = "contended_worker_max_over_min"
	MRegrab       = "contended_regrab_pct"
	MClientCPU    = "contended_client_cpu_us"
	MServerCPU    = "contended_server_cpu_us"
	MFloorP50     = "p50_us"
	MFloorP99     = "p99_us"
)

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// pct returns the p-quantile (0..1) of d, nearest rank; d is sorted.
func pct(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	if len(d) == 0 {
		return 0
	}
	i := int(p*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// clients is one implementation's open clients: c[0] holds, the others
// wait or contend.
type clients []Lock

// acquire takes key on l: Try when the library has it, else Wait.
func acquire(ctx context.Context, l Lock, key string) (Unlock, error) {
	u, ok, err := l.Try(ctx, key)
	if errors.Is(err, ErrNoTry) {
		return l.Wait(ctx, key)
	}
	if err == nil && !ok {
		err = fmt.Errorf("uncontended key %q is held", key)
	}
	return u, err
}

type grant struct {
	u   Unlock
	at  time.Time
	err error
}

// drain times, n times: the holder's release call starts → every one of
// the waiters has held once (each releases at once).
func drain(ctx context.Context, holder Lock, waiters []Lock, key string, n int, settle time.Duration, s sample) error {
	var lat []time.Duration
	for range n {
		u, err := holder.Wait(ctx, key)
		if err != nil {
			return fmt.Errorf("holder: %w", err)
		}
		var (
			mu   sync.Mutex
			last time.Time
			errs []error
			wg   sync.WaitGroup
		)
		for _, w := range waiters {
			wg.Go(func() {
				g, err := w.Wait(ctx, key)
				at := time.Now()
				if err == nil {
					err = g(ctx)
				}
				mu.Lock()
				defer mu.Unlock()
				if at.After(last) {
					last = at
				}
				errs = append(errs, err)
			})
		}
		time.Sleep(settle)
		t0 := time.Now()
		err = u(ctx)
		wg.Wait()
		if err := errors.Join(append(errs, err)...); err != nil {
			return err
		}
		lat = append(lat, last.Sub(t0))
	}
	s[MDrain] = ms(pct(lat, 0.5))
	return nil
}

// contend runs the workers on one key for d: each loops Wait, release.
// A wait cut off by the end of the run counts toward the worst wait.
// contend runs the workers on one key for d: throughput, worst wait,
// spread, re-grabs, and the CPU time per grant of this process (every
// client) and of the store's server processes (server, if not nil).
func contend(ctx context.Context, workers []Lock, server func() []int, key string, d time.Duration, s sample) error {
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		last    atomic.Int64 // worker index+1 of the previous grant
		regrabs atomic.Int64
		mu      sync.Mutex
		worst   time.Duration // the longest wait, up to the run's end
		cut     time.Duration // the longest return of a wait the end cut off
		counts  = make([]int, len(workers))
		errs    []error
		wg      sync.WaitGroup
	)
	var pids []int
	if server != nil {
		pids = server()
	}
	srv0, srvOK := serverCPU(pids)
	start, cpu0 := time.Now(), processCPU()
	end, _ := rctx.Deadline()
	for i, w := range workers {
		wg.Go(func() {
			var myWorst, myCut time.Duration
			var err error
			for rctx.Err() == nil {
				t0 := time.Now()
				var u Unlock
				u, err = w.Wait(rctx, key)
				if err != nil {
					if rctx.Err() != nil {
						// Cut off by the run's end: it waited until
						// the end, and then took cut to return.
						myWorst = max(myWorst, end.Sub(t0))
						myCut, err = time.Since(end), nil
					}
					break
				}
				myWorst = max(myWorst, min(time.Since(t0), end.Sub(t0))) // a grant after the end waited until the end
				counts[i]++
				if last.Swap(int64(i+1)) == int64(i+1) {
					regrabs.Add(1)
				}
				if err = u(context.WithoutCancel(ctx)); err != nil {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			worst, cut = max(worst, myWorst), max(cut, myCut)
			errs = append(errs, err)
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	srv, srvOK2 := serverCPU(pids)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	lo, hi := slices.Min(counts), slices.Max(counts)
	s[MThroughput] = float64(total) / elapsed.Seconds()
	s[MWorstWait] = ms(worst)
	s[MCutoffReturn] = ms(cut)
	s[MWorkerMin] = float64(lo)
	s[MWorkerMax] = float64(hi)
	s[MWorkerRatio] = float64(hi) / float64(max(lo, 1)) // a starved worker counts as 1
	if total > 1 {
		s[MRegrab] = 100 * float64(regrabs.Load()) / float64(total-1)
	}
	if total > 0 && cpu > 0 {
		s[MClientCPU] = us(cpu) / float64(total)
	}
	if total > 0 && srvOK && srvOK2 {
		s[MServerCPU] = us(srv-srv0) / float64(total)
	}
	return nil
}

// floor times n operations.
func floor(ctx context.Context, op func(context.Context) error, n int, s sample) error {
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := op(ctx); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	s[MFloorP50] = us(pct(lat, 0.5))
	s[MFloorP99] = us(pct(lat, 0.99))
	return nil
}

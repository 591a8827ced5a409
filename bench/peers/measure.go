package peers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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

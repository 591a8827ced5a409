package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// HoldManyResult is what holding many leases on one Client cost.
type HoldManyResult struct {
	Leases         int           // leases held
	Lost           int           // leases that ended before Release
	Goroutines     int           // goroutines added while they were held (settled samples)
	HeapPerLease   int64         // bytes of live heap per held lease
	AcquireElapsed time.Duration // time to acquire all of them
	Held           time.Duration // how long they were held with auto-renew on
}

func (r HoldManyResult) String() string {
	return fmt.Sprintf("%d leases: %d lost, +%d goroutines, %d B heap per lease, acquired in %v, held %v",
		r.Leases, r.Lost, r.Goroutines, r.HeapPerLease, r.AcquireElapsed.Round(time.Millisecond), r.Held.Round(time.Millisecond))
}

// HoldMany acquires n leases on distinct names (name-0 … name-(n−1)) through
// c with auto-renew on and the given TTL, holds them for hold (three TTLs
// is the usual test: several renewals each), samples the goroutines and
// heap they cost, releases them all, and reports. A Client that runs a
// goroutine per lease shows it in Goroutines; one that renews too late
// shows it in Lost.
func HoldMany(ctx context.Context, c *fencelock.Client, name string, n int, ttl, hold time.Duration) (HoldManyResult, error) {
	r := HoldManyResult{Leases: n}
	if n <= 0 || ttl <= 0 || hold < 0 {
		return r, fmt.Errorf("%w: HoldMany needs n > 0, ttl > 0, hold ≥ 0", fencelock.ErrInvalid)
	}
	baseG, baseHeap := settledRuntime()
	ls := make([]*fencelock.Lease, n)
	defer func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for _, l := range ls {
			if l == nil {
				continue
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				_ = l.Release(context.WithoutCancel(ctx))
			})
		}
		wg.Wait()
	}()
	o := &fencelock.AcquireOptions{TTL: ttl}
	start := time.Now()
	// A few acquires in flight at once: what a busy service does.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 16)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			l, err := c.TryAcquire(ctx, name+"-"+strconv.Itoa(i), o)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("lease %d of %d: %w", i, n, err)
				}
				return
			}
			ls[i] = l
		})
	}
	wg.Wait()
	if firstErr != nil {
		return r, firstErr
	}
	r.AcquireElapsed = time.Since(start)
	heldFrom := time.Now()
	_, heap := settledRuntime()
	r.HeapPerLease = max(0, int64(heap)-int64(baseHeap)) / int64(n)
	// Renewals in flight run briefly on goroutines of their own, and on a
	// busy machine a burst of them (every TTL/3, the leases having been
	// taken within moments) can span a good part of the hold: take the
	// least of samples every 10ms through the whole hold, which a
	// goroutine per lease would never lower.
	least, err := leastGoroutines(ctx, hold, 10*time.Millisecond)
	if err != nil {
		return r, err
	}
	r.Goroutines = least - baseG
	r.Held = time.Since(heldFrom)
	for _, l := range ls {
		if l.Err() != nil {
			r.Lost++
		}
	}
	return r, nil
}

// leastGoroutines samples runtime.NumGoroutine every step for d and
// returns the least count seen.
func leastGoroutines(ctx context.Context, d, step time.Duration) (int, error) {
	least := runtime.NumGoroutine()
	end := time.NewTimer(d)
	defer end.Stop()
	tick := time.NewTicker(step)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			least = min(least, runtime.NumGoroutine())
		case <-end.C:
			return min(least, runtime.NumGoroutine()), nil
		case <-ctx.Done():
			return least, ctx.Err()
		}
	}
}

// settledRuntime returns the goroutine count and live heap after a GC.
func settledRuntime() (goroutines int, heap uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapAlloc
}

// Check returns an error if a lease was lost or holding them added more
// than maxGoroutines goroutines (the bound of an O(1)-per-Client design
// on the backend at hand), else nil.
func (r HoldManyResult) Check(maxGoroutines int) error {
	var errs []error
	if r.Lost != 0 {
		errs = append(errs, fmt.Errorf("%d of %d auto-renewed leases lost within %v", r.Lost, r.Leases, r.Held.Round(time.Millisecond)))
	}
	if r.Goroutines > maxGoroutines {
		errs = append(errs, fmt.Errorf("holding %d leases added %d goroutines (at most %d allowed): want O(1) per Client, not per lease", r.Leases, r.Goroutines, maxGoroutines))
	}
	return errors.Join(errs...)
}

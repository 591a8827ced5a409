package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
)

func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var sf storeFlags
	sf.register(fs)
	n := fs.Int("n", 2000, "uncontended acquire+release iterations")
	handoffs := fs.Int("handoffs", 200, "hand-offs to measure")
	workers := fs.Int("workers", 8, "contending workers")
	dur := fs.Duration("duration", 5*time.Second, "contention run length")
	if err := parse(fs, args); err != nil {
		return err
	}
	url, cleanup, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cs, closeAll, err := openClients(ctx, url, "bench", 2)
	if err != nil {
		return err
	}
	defer closeAll()
	a, b := cs[0], cs[1]
	fmt.Printf("bench on %s (%s backend)\n", url, a.Capabilities().Backend)
	lat, err := acquireReleaseLatencies(ctx, a, *n, func(done int) { fmt.Printf("  ... %d/%d acquire+release\n", done, *n) })
	if err != nil {
		return err
	}
	fmt.Printf("acquire+release (uncontended): p50 %v  p99 %v  (%d runs)\n", conformance.Percentile(lat, 0.5), conformance.Percentile(lat, 0.99), len(lat))

	h, err := conformance.HandOffLatencies(ctx, a, b, "handoff", *handoffs)
	if err != nil {
		return err
	}
	fmt.Printf("hand-off (release → blocked Acquire returns): p50 %v  p99 %v  (%d runs)\n", conformance.Percentile(h, 0.5), conformance.Percentile(h, 0.99), len(h))

	lockers := []fencelock.Locker{a, b}
	r, err := conformance.Contended(ctx, lockers, "contended", *workers, *dur)
	if err != nil {
		return err
	}
	minW, maxW := r.PerWorker[0], r.PerWorker[0]
	for _, c := range r.PerWorker {
		minW, maxW = min(minW, c), max(maxW, c)
	}
	fmt.Printf("contended (%d workers, %v): %.0f sections/s, wait p50 %v p99 %v max %v, per-worker sections min %d max %d\n",
		*workers, *dur, float64(r.Sections)/r.Elapsed.Seconds(), r.WaitP50, r.WaitP99, r.WaitMax, minW, maxW)
	return nil
}

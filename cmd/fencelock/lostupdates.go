package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/guard"
)

func runLostUpdates(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("lostupdates", flag.ContinueOnError)
	var sf storeFlags
	sf.register(fs)
	workers := fs.Int("workers", 8, "concurrent workers (each with its own client)")
	sections := fs.Int("sections", 10000, "critical sections (increments) per run")
	stallList := fs.String("stall", "0.001,0.01,0.05", "comma-separated stall rates: share of sections that stall 1.5×TTL")
	ttlFlag := fs.Duration("ttl", 50*time.Millisecond, "lease TTL (raised to the store's minimum)")
	resource := fs.String("resource", "memory", "guarded counter: memory"+resourceHelp())
	profile := fs.String("profile", "quick", "protocol: quick (this command's own: no work time, rejected writes not redone), study (the published study: TTL 200ms, 5ms work, 300ms stalls, rejected writes redone, 10,000 sections) or overlap (100ms work, 100–300ms stalls at 5%, 2,000 sections)")
	runs := fs.Int("runs", 1, "runs per setting with --profile study|overlap (the study used 5); medians and ranges are printed")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *profile != "quick" {
		return runLostUpdatesProfile(ctx, &sf, *profile, *runs, *workers, *sections, *resource, fs)
	}
	rates, err := parseRates(*stallList)
	if err != nil {
		return err
	}
	if *workers <= 0 || *sections <= 0 {
		return fmt.Errorf("--workers and --sections must be positive")
	}
	url, cleanup, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cs, closeAll, err := openClients(ctx, url, "lostupdates", *workers)
	if err != nil {
		return err
	}
	defer closeAll()
	lks := lockers(cs)
	caps, ttl := cs[0].Capabilities(), demoTTL(cs[0], *ttlFlag)
	newRes, closeRes, err := openResource(ctx, *resource, url)
	if err != nil {
		return err
	}
	defer closeRes()
	fmt.Printf("lost updates on %s (%s, fence %s): %d workers, %d sections per run, TTL %v, stalls of %v, resource %s\n\n",
		url, caps.Backend, caps.Fence, *workers, *sections, ttl, ttl+ttl/2, *resource)
	fmt.Printf("%-7s %-12s %8s %8s %9s %9s %8s %7s %9s\n", "stall", "mode", "sections", "stalled", "accepted", "rejected", "final", "lost", "time")
	for ri, rate := range rates {
		for _, m := range conformance.Modes() {
			res, err := newRes(ctx, fmt.Sprintf("run-%d-%d", ri, m))
			if err != nil {
				return err
			}
			start := time.Now()
			last := start
			cfg := conformance.LostUpdatesConfig{
				Name: fmt.Sprintf("counter-%d-%d", ri, m), Sections: *sections, Workers: *workers, StallRate: rate, TTL: ttl,
				Progress: func(done, total int) {
					if time.Since(last) > 2*time.Second {
						last = time.Now()
						fmt.Fprintf(os.Stderr, "  ... %s %s: %d/%d sections, %v\n", fmtRate(rate), m, done, total, time.Since(start).Round(time.Second))
					}
				},
			}
			r, err := conformance.LostUpdates(ctx, lks, res, m, cfg)
			if err != nil {
				return err
			}
			fmt.Printf("%-7s %-12s %8d %8d %9d %9d %8d %7d %8.1fs\n", fmtRate(rate), m, r.Sections, r.Stalled, r.Accepted, r.Rejected, r.Final, r.Lost, r.Elapsed.Seconds())
		}
	}
	fmt.Println("\nlost = writes the resource accepted whose increment is gone; rejected = stale writes the guard refused (the worker knows and can retry).")
	return nil
}

// openResource returns a factory of fresh guarded counters.
func openResource(ctx context.Context, kind, storeURL string) (func(ctx context.Context, id string) (guard.Resource, error), func(), error) {
	if kind == "memory" {
		return func(context.Context, string) (guard.Resource, error) { return &guard.Counter{}, nil }, func() {}, nil
	}
	if f, ok := resources[kind]; ok {
		return f(ctx, storeURL)
	}
	return nil, nil, fmt.Errorf("unknown --resource %q: want memory%s", kind, resourceHelp())
}

// resources holds the real-store guarded counters (registered by a file
// per store); storeURL is the lock store's URL, which a resource may reuse.
var resources = map[string]func(ctx context.Context, storeURL string) (func(ctx context.Context, id string) (guard.Resource, error), func(), error){}

func resourceHelp() string {
	var s string
	for k := range resources {
		s += ", " + k
	}
	return s
}

func parseRates(s string) ([]float64, error) {
	var rates []float64
	for _, f := range strings.Split(s, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("--stall %q: want comma-separated rates between 0 and 1, e.g. 0.001,0.01,0.05", s)
		}
		rates = append(rates, r)
	}
	return rates, nil
}

func fmtRate(r float64) string { return strconv.FormatFloat(r*100, 'g', 3, 64) + "%" }

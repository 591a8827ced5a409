package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
)

// runTorture: random operations under a seeded fault schedule, the
// history checked (conformance.Torture). Exit 1 on a violation, with
// each violation's window and the seed that replays the schedule.
func runTorture(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("torture", flag.ContinueOnError)
	var sf storeFlags
	sf.register(fs)
	duration := fs.Duration("duration", 2*time.Minute, "how long the workers run random operations while faults are injected (the liveness phase follows)")
	seed := fs.Uint64("seed", 0, "seed of every random choice (operations and fault schedule); 0: a random seed, printed. Timing is not replayed, only the schedule")
	workers := fs.Int("clients", 6, "concurrent workers, spread over 2 direct Clients and 1 behind the fault proxy")
	names := fs.Int("names", 3, "lock names the workers share")
	ttl := fs.Duration("ttl", 400*time.Millisecond, "lease TTL (raised to the store's minimum)")
	history := fs.String("history", "", "write the recorded history here (JSON lines)")
	svg := fs.String("svg", "", "write a timeline SVG here: the first violation's window, or the whole run")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *duration <= 0 || *workers <= 0 || *names <= 0 || *ttl <= 0 {
		fmt.Fprintln(os.Stderr, "fencelock torture: --duration, --clients, --names and --ttl must be positive")
		return usageError{errors.New("bad flag value")}
	}
	rawURL, cleanup, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	h, err := conformance.NewURLHarness(ctx, rawURL)
	if err != nil {
		return fmt.Errorf("%s: %s", fencelock.RedactURL(rawURL), strings.TrimPrefix(scrub(err.Error(), rawURL), "fencelock: "))
	}
	defer h.Close()
	if *seed == 0 {
		*seed = conformance.RandomSeed()
	}
	res, err := conformance.Torture(ctx, h, conformance.TortureOptions{
		Duration: *duration, Seed: *seed, Workers: *workers, Names: *names, TTL: *ttl, Out: os.Stdout,
	})
	if err != nil && res == nil {
		return err
	}
	replay := fmt.Sprintf("fencelock torture --url '%s' --duration %v --seed %d --clients %d --names %d --ttl %v",
		fencelock.RedactURL(rawURL), *duration, *seed, *workers, *names, *ttl)
	res.WriteReport(os.Stdout, replay)
	if werr := res.WriteFiles(*history, *svg); werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	if n := len(res.Violations); n > 0 {
		return fmt.Errorf("%d violations (seed %d)", n, *seed)
	}
	return nil
}

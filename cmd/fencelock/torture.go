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

// The torture run's shape unless flags say otherwise (compare uses it).
const (
	tortureWorkers = 6
	tortureNames   = 3
	tortureTTL     = 400 * time.Millisecond
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
	workers := fs.Int("clients", tortureWorkers, "concurrent workers, spread over 2 direct Clients and 1 behind the fault proxy")
	names := fs.Int("names", tortureNames, "lock names the workers share")
	ttl := fs.Duration("ttl", tortureTTL, "lease TTL (raised to the store's minimum)")
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
	if *seed == 0 {
		*seed = conformance.RandomSeed()
	}
	o := conformance.TortureOptions{Duration: *duration, Seed: *seed, Workers: *workers, Names: *names, TTL: *ttl, Out: os.Stdout}
	res, err := tortureURL(ctx, rawURL, o)
	if err != nil && res == nil {
		return err
	}
	replay := tortureReplay(fencelock.RedactURL(rawURL), o)
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

// tortureURL runs conformance.Torture on the store at rawURL, through
// the URL harness (its fault proxy): `fencelock torture` and `compare`.
// A nil result means the run could not start.
func tortureURL(ctx context.Context, rawURL string, o conformance.TortureOptions) (*conformance.TortureResult, error) {
	h, err := conformance.NewURLHarness(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", fencelock.RedactURL(rawURL), strings.TrimPrefix(scrub(err.Error(), rawURL), "fencelock: "))
	}
	defer h.Close()
	return conformance.Torture(ctx, h, o)
}

// tortureReplay is the command that replays o's schedule on url.
func tortureReplay(url string, o conformance.TortureOptions) string {
	return fmt.Sprintf("fencelock torture --url '%s' --duration %v --seed %d --clients %d --names %d --ttl %v",
		url, o.Duration, o.Seed, o.Workers, o.Names, o.TTL)
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/guard"
)

// compareConfig is what `fencelock compare` measures.
type compareConfig struct {
	n, handoffs   int
	dur           time.Duration
	studySections int
	studyRuns     int
	studyRate     float64
	held          int // leases held at once for the cost table
	faults        bool
	peers         string        // peers.json from `make bench-peers`; "" for none
	failoverRuns  int           // leader kills timed per store (0: no election section)
	failoverTTL   time.Duration // term TTL asked (raised to the store's minimum)
	torture       time.Duration // torture run per store (0: none)
	tortureSeed   uint64
	note          string // said of the machine after the run time, e.g. that it was shared
	peersOnly     bool   // re-render only the peers section of the document at --out
}

// backendResult is one backend's measurements; a zero field was not
// measured (err says why when the backend could not be measured at all).
type backendResult struct {
	label    string
	url      string
	server   string // server and configuration it ran on
	caps     fencelock.Capabilities
	lat      []time.Duration // uncontended TryAcquire+Release
	handoff  []time.Duration
	cont     conformance.ContendedResult
	study    *studyRun
	hold     conformance.HoldManyResult
	holdTTL  time.Duration
	holdErr  error // the cost table's measure failed (the others may not have)
	failover failoverResult
	torture  tortureRun
	err      error
}

// parseCompareFlags parses compare's flags.
func parseCompareFlags(args []string) (cfg compareConfig, urls multiFlag, out *string, err error) {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.Var(&urls, "url", "a store URL to compare (repeatable); default: start every backend's server locally, configured as in production")
	out = fs.String("out", "docs/comparison.md", "where to write the markdown ('-' for stdout); charts go to img/ next to it (with --peers-only: the existing document to rewrite)")
	fs.IntVar(&cfg.n, "n", 1000, "uncontended acquire+release iterations per store")
	fs.IntVar(&cfg.handoffs, "handoffs", 100, "hand-offs per store")
	fs.DurationVar(&cfg.dur, "duration", 3*time.Second, "contention run length per store")
	fs.IntVar(&cfg.studySections, "study-sections", 300, "sections per run of the lost-update study protocol (the study used 10,000)")
	fs.IntVar(&cfg.studyRuns, "study-runs", 3, "runs of the study protocol per mode (stores whose minimum TTL exceeds the protocol's run it once)")
	fs.Float64Var(&cfg.studyRate, "study-stall", 0.05, "share of sections that stall in the study protocol")
	fs.IntVar(&cfg.held, "held", 1000, "leases one Client holds at once for the cost table (fewer where a backend's row says so)")
	fs.BoolVar(&cfg.faults, "faults", true, "run the backends' fault tests (go test) and tabulate what they measured")
	fs.StringVar(&cfg.peers, "peers", "docs/bench/peers.json", "peer benchmark results, the JSON file that make bench-peers writes ('' to leave them out)")
	fs.IntVar(&cfg.failoverRuns, "failover-runs", 5, "leader kills timed per store for the election section (0: leave it out)")
	fs.DurationVar(&cfg.failoverTTL, "failover-ttl", 500*time.Millisecond, "term TTL for the election section (raised to the store's minimum)")
	fs.DurationVar(&cfg.torture, "torture", 30*time.Second, "torture run per store (0: leave the section out)")
	fs.Uint64Var(&cfg.tortureSeed, "torture-seed", 24, "seed of the torture runs")
	fs.StringVar(&cfg.note, "note", "", "a sentence on the machine for the document's first paragraph (e.g. that other jobs shared it)")
	fs.BoolVar(&cfg.peersOnly, "peers-only", false, "measure nothing and start no server: re-render only the \"Next to the peers\" section of the existing document at --out from --peers, leaving every other byte as it is; img/contention.svg is redrawn, img/handoff.svg left")
	if err := parse(fs, args); err != nil {
		return cfg, nil, nil, err
	}
	if cfg.failoverRuns < 0 || cfg.failoverTTL <= 0 || cfg.torture < 0 || cfg.tortureSeed == 0 {
		fmt.Fprintln(os.Stderr, "fencelock compare: --failover-runs and --torture must not be negative, --failover-ttl and --torture-seed must be positive")
		return cfg, nil, nil, usageError{errors.New("bad flag value")}
	}
	if cfg.peersOnly && len(urls) > 0 {
		fmt.Fprintln(os.Stderr, "fencelock compare: --peers-only measures nothing; --url does not go with it")
		return cfg, nil, nil, usageError{errors.New("--url with --peers-only")}
	}
	return cfg, urls, out, nil
}

func runCompare(ctx context.Context, args []string) error {
	cfg, urls, out, err := parseCompareFlags(args)
	if err != nil {
		return err
	}
	if cfg.peersOnly {
		return runPeersOnly(*out, cfg.peers)
	}
	start := time.Now()
	targets, cleanup, err := compareTargets(ctx, urls)
	defer cleanup()
	if err != nil {
		return err
	}
	d := &compareDoc{cmd: compareCommand(args), date: time.Now().UTC(), cfg: cfg, load: [2]string{loadAverage()}}
	for _, tg := range targets {
		fmt.Fprintf(os.Stderr, "compare: %s (%s)\n", tg.label, fencelock.RedactURL(tg.url))
		r := compareOne(ctx, tg, targets, cfg)
		if r.err != nil {
			fmt.Fprintf(os.Stderr, "compare: %s: %v\n", tg.label, r.err)
		}
		if tg.url != "" && cfg.failoverRuns > 0 {
			r.failover = measureFailover(ctx, tg.url, cfg.failoverTTL, cfg.failoverRuns)
			fmt.Fprintf(os.Stderr, "compare: %s: failover %s (TTL %v)\n", tg.label, failoverCell(r.failover), r.failover.ttl)
		}
		if tg.url != "" && cfg.torture > 0 {
			r.torture = compareTorture(ctx, tg, cfg.torture, cfg.tortureSeed)
			fmt.Fprintf(os.Stderr, "compare: %s: torture %d operations, faults %s, %d violations\n", tg.label, r.torture.ops, countsByKind(r.torture.faults), len(r.torture.violations))
		}
		d.results = append(d.results, r)
	}
	if cfg.faults {
		fmt.Fprintf(os.Stderr, "compare: running the fault tests\n")
		d.faults, d.faultsErr = faultTable(ctx)
		if d.faultsErr != nil {
			fmt.Fprintf(os.Stderr, "compare: fault tests: %v\n", d.faultsErr)
		}
	}
	if cfg.peers != "" {
		d.peers, d.peersErr = readPeers(cfg.peers)
		if d.peersErr != nil {
			fmt.Fprintf(os.Stderr, "compare: peers: %v\n", d.peersErr)
		}
	}
	d.elapsed = time.Since(start)
	d.load[1] = loadAverage()
	md := d.render()
	if *out == "-" {
		_, err = os.Stdout.Write(md)
		return err
	}
	imgDir := filepath.Join(filepath.Dir(*out), "img")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	for name, svg := range d.charts() {
		if err := os.WriteFile(filepath.Join(imgDir, name), svg, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(*out, md, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "compare: wrote %s and %s/ in %v\n", *out, imgDir, d.elapsed.Round(time.Second))
	return nil
}

// compareOne measures one store. A failure is recorded in the result, so
// that the document still has the store's row, saying what failed.
func compareOne(ctx context.Context, tg target, all []target, cfg compareConfig) (r backendResult) {
	r = backendResult{label: tg.label, url: tg.url, server: tg.server}
	if tg.url == "" {
		r.err = errors.New(tg.server)
		return r
	}
	clients, closeAll, err := openClients(ctx, tg.url, "compare", 8)
	if err != nil {
		r.err = err
		return r
	}
	defer closeAll()
	r.caps = clients[0].Capabilities()
	if r.lat, err = acquireReleaseLatencies(ctx, clients[0], cfg.n, nil); err != nil {
		r.err = fmt.Errorf("acquire+release: %w", err)
		return r
	}
	if r.handoff, err = conformance.HandOffLatencies(ctx, clients[0], clients[1], "handoff", cfg.handoffs); err != nil {
		r.err = fmt.Errorf("hand-off: %w", err)
		return r
	}
	if r.cont, err = conformance.Contended(ctx, []fencelock.Locker{clients[0], clients[1]}, "contended", 8, cfg.dur); err != nil {
		r.err = fmt.Errorf("contention: %w", err)
		return r
	}
	if cfg.held > 0 {
		r.hold, r.holdTTL, r.holdErr = compareHold(ctx, tg, cfg.held)
	}
	if cfg.studySections > 0 && cfg.studyRuns > 0 {
		if r.study, err = compareStudy(ctx, clients, tg, all, cfg); err != nil {
			r.err = fmt.Errorf("study protocol: %w", err)
		}
	}
	return r
}

// compareStudy runs the study's protocol on the store's clients, on a
// Postgres row when compare has a Postgres (as the study did), else on an
// in-memory guarded counter. A store whose minimum TTL exceeds the
// protocol's runs it once with that TTL (stall 1.5 × TTL).
func compareStudy(ctx context.Context, clients []*fencelock.Client, tg target, all []target, cfg compareConfig) (*studyRun, error) {
	kind, resURL := "memory", ""
	for _, t := range all {
		if strings.HasPrefix(t.url, "postgres://") {
			kind, resURL = "postgres", t.url
		}
	}
	newRes, closeRes, err := openResource(ctx, kind, resURL)
	if err != nil {
		return nil, err
	}
	defer closeRes()
	p := conformance.StudyProfile()
	runs := cfg.studyRuns
	if min := clients[0].Capabilities().MinTTL; min > p.TTL {
		p.TTL = demoTTL(clients[0], min)
		p.StallMin, p.StallMax = p.TTL*3/2, p.TTL*3/2
		runs = 1
	}
	p.Sections = cfg.studySections
	var newResource func(ctx context.Context, id string) (guard.Resource, error) = newRes
	sr, err := runStudyConfig(ctx, lockers(clients), newResource, "study", p, []float64{cfg.studyRate}, runs, "compare")
	if err != nil {
		return nil, err
	}
	sr.resource = kind
	return sr, nil
}

// compareHold measures one Client holding n leases (at most tg.maxHeld),
// opened with tg.heldParams added to its URL (a pool large enough for
// them, on Postgres).
func compareHold(ctx context.Context, tg target, n int) (conformance.HoldManyResult, time.Duration, error) {
	if tg.maxHeld > 0 {
		n = min(n, tg.maxHeld)
	}
	url := tg.url
	if tg.heldParams != "" {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += sep + tg.heldParams
	}
	cs, closeAll, err := openClients(ctx, url, "held", 1)
	if err != nil {
		return conformance.HoldManyResult{}, 0, err
	}
	defer closeAll()
	// Three renewals each (at TTL/3, 2/3 and 1), then release between two
	// bursts of renewals.
	ttl := demoTTL(cs[0], 6*time.Second)
	r, err := conformance.HoldMany(ctx, cs[0], "held", n, ttl, ttl+ttl/6)
	if err != nil {
		return conformance.HoldManyResult{}, ttl, fmt.Errorf("holding %d leases: %w", n, err)
	}
	return r, ttl, nil
}

// compareCommand is the command line that ran compare, an argument with
// a space quoted.
func compareCommand(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if a == "" || strings.ContainsAny(a, " '") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.TrimSpace("go run ./cmd/fencelock compare " + strings.Join(q, " "))
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
)

func runConformance(ctx context.Context, args []string) error {
	f, err := parseConformanceFlags(args)
	if err != nil {
		return err
	}
	out := os.Stdout
	if f.format != "text" {
		out = os.Stderr
	}
	if f.list {
		for _, n := range conformance.Checks() {
			fmt.Println(n)
		}
		return nil
	}
	if err := f.check(); err != nil {
		return err
	}
	rawURL, cleanup, err := f.sf.open(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	shown := fencelock.RedactURL(rawURL)
	caps, err := probeStore(ctx, rawURL, f.probe)
	backend := caps.Backend
	if err != nil {
		msg := strings.TrimPrefix(scrub(err.Error(), rawURL), "fencelock: ")
		if errors.Is(err, fencelock.ErrInvalid) {
			return fmt.Errorf("%s: %s", shown, msg)
		}
		return fmt.Errorf("cannot reach %s: %s", shown, msg)
	}
	fmt.Fprintf(out, "conformance suite against %s (%s backend; lock names under a random fencelock-conformance-* prefix per check; %s)\n",
		shown, backend, whatStays(backend))
	started := time.Now()
	res, lost := runChecks(ctx, f, rawURL, out)
	n := countOutcomes(res)
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped, %d not applicable", n.pass, n.fail, n.skip, n.na)
	if left := len(conformance.Checks()) - len(res); left > 0 && f.filter == "" {
		fmt.Fprintf(out, ", %d not run", left)
	}
	fmt.Fprintln(out)
	if f.format != "text" {
		if err := writeReport(os.Stdout, f.format, shown, caps, started, res); err != nil {
			return err
		}
	}
	switch {
	case lost != nil:
		return lost
	case n.timedOut > 0:
		return fmt.Errorf("a conformance check hit its deadline against %s: the store stopped answering or misbehaves; the run stopped there", shown)
	case n.fail > 0:
		return fmt.Errorf("%d conformance check(s) failed", n.fail)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return nil
}

// conformanceFlags is the conformance command's command line.
type conformanceFlags struct {
	sf             storeFlags
	filter         string
	list, failFast bool
	probe, base    time.Duration
	format         string
}

// parseConformanceFlags parses args and checks --format.
func parseConformanceFlags(args []string) (*conformanceFlags, error) {
	f := &conformanceFlags{}
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	f.sf.register(fs)
	fs.StringVar(&f.filter, "run", "", "run only checks whose name contains this")
	fs.BoolVar(&f.list, "list", false, "list the checks and exit")
	fs.BoolVar(&f.failFast, "failfast", false, "stop after the first failing check")
	fs.DurationVar(&f.probe, "probe-timeout", 10*time.Second, "how long the store may take to answer the first request (Open + TryAcquire + Release) before the run gives up")
	fs.DurationVar(&f.base, "deadline", conformance.DefaultBaseDeadline, "fixed part of each check's deadline (each check may run this + k×TTL)")
	fs.StringVar(&f.format, "format", "text", "result format on stdout: text (a line per check), json, or junit (JUnit XML, which CI systems render); with json and junit the lines per check go to stderr")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if !slices.Contains(reportFormats, f.format) {
		fmt.Fprintf(os.Stderr, "fencelock conformance: --format %q: want one of %s\n", f.format, strings.Join(reportFormats, ", "))
		return nil, usageError{errors.New("bad --format")}
	}
	return f, nil
}

// check checks the flags a run needs (--list needs none): --run must
// match a check, the durations must be positive.
func (f *conformanceFlags) check() error {
	if f.filter != "" && !slices.ContainsFunc(conformance.Checks(), func(n string) bool { return strings.Contains(n, f.filter) }) {
		fmt.Fprintf(os.Stderr, "fencelock conformance: no check name contains %q ('fencelock conformance --list' lists them)\n", f.filter)
		return usageError{errors.New("no check matches --run")}
	}
	if f.probe <= 0 || f.base <= 0 {
		fmt.Fprintln(os.Stderr, "fencelock conformance: --probe-timeout and --deadline must be positive")
		return usageError{errors.New("bad duration")}
	}
	return nil
}

// runChecks runs the suite against rawURL, a line per check to out. lost
// is set if the store stopped answering mid-run (a failed check is
// followed by a probe): the run stops there.
func runChecks(ctx context.Context, f *conformanceFlags, rawURL string, out io.Writer) (res []conformance.Result, lost error) {
	shown := fencelock.RedactURL(rawURL)
	res = conformance.RunWith(ctx, func(ctx context.Context) (conformance.Harness, error) {
		return conformance.NewURLHarness(ctx, rawURL)
	}, &conformance.RunOptions{Filter: f.filter, Out: out, Progress: 15 * time.Second, FailFast: f.failFast, StopOnDeadline: true, BaseDeadline: f.base,
		Continue: func(r conformance.Result) bool {
			if r.Outcome != "fail" {
				return true
			}
			// A failure may be the store going away: check before going on.
			if _, err := probeStore(ctx, rawURL, f.probe); err != nil {
				lost = fmt.Errorf("%s stopped answering during %s: %s", shown, r.Check, strings.TrimPrefix(scrub(err.Error(), rawURL), "fencelock: "))
				return false
			}
			return true
		}})
	return res, lost
}

// outcomes counts a run's results by outcome.
type outcomes struct {
	pass, fail, skip, na int
	timedOut             int // of any outcome: hit the check's deadline
}

func countOutcomes(res []conformance.Result) outcomes {
	var n outcomes
	for _, r := range res {
		switch r.Outcome {
		case "pass":
			n.pass++
		case "fail":
			n.fail++
		case "n/a":
			n.na++
		default:
			n.skip++
		}
		if r.TimedOut {
			n.timedOut++
		}
	}
	return n
}

// probeStore opens the store and takes and releases a throwaway lock,
// within timeout, and returns the backend's capabilities: an unreachable store is
// reported once, before any check runs. It returns at most a second after
// timeout even if the driver is slower to give up (a driver may wait a
// while to clean up an attempt of unknown outcome); the probe then ends in
// the background.
func probeStore(ctx context.Context, rawURL string, timeout time.Duration) (fencelock.Capabilities, error) {
	type result struct {
		caps fencelock.Capabilities
		err  error
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	got := make(chan result, 1)
	go func() {
		b, err := probeOnce(ctx, rawURL, timeout)
		got <- result{b, err}
	}()
	grace := time.NewTimer(timeout + time.Second)
	defer grace.Stop()
	select {
	case r := <-got:
		return r.caps, r.err
	case <-grace.C:
		return fencelock.Capabilities{}, fmt.Errorf("no answer within %v (--probe-timeout)", timeout)
	}
}

func probeOnce(ctx context.Context, rawURL string, timeout time.Duration) (fencelock.Capabilities, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	c, err := client(ctx, rawURL, &fencelock.Options{Prefix: "fencelock-conformance-probe-" + hex.EncodeToString(b) + "/", ReleaseTimeout: timeout})
	if err != nil {
		return fencelock.Capabilities{}, probeErr(ctx, timeout, err)
	}
	defer c.Close()
	caps := c.Capabilities()
	ttl := max(caps.MinTTL, time.Second)
	if g := caps.TTLGranularity; g > 0 && ttl%g != 0 {
		ttl = (ttl/g + 1) * g
	}
	l, err := c.TryAcquire(ctx, "probe", &fencelock.AcquireOptions{TTL: ttl, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		return caps, probeErr(ctx, timeout, err)
	}
	if err := l.Release(ctx); err != nil {
		return caps, probeErr(ctx, timeout, err)
	}
	return caps, nil
}

func probeErr(ctx context.Context, timeout time.Duration, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("no answer within %v (--probe-timeout): %w", timeout, err)
	}
	return err
}

// scrub removes the URL's password from a message (a driver error may
// quote its connection string).
func scrub(msg, rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}

// whatStays says what a run leaves in the store, by backend.
func whatStays(backend string) string {
	switch backend {
	case "redis":
		return "locks are released; one fence counter key per lock name used stays, by design (fences must keep increasing), with no TTL"
	case "redlock":
		return "locks are released; one fence counter key per lock name used stays on every primary, by design"
	case "dynamodb":
		return "locks are released; one item per lock name used stays, by design: it carries the fence"
	case "etcd":
		return "nothing stays: lock keys are deleted on release or with their leases"
	case "pgadvisory":
		return "nothing stays: advisory locks end with their release or session"
	case "zookeeper":
		return "nothing stays: lock nodes are ephemeral and their parents are container nodes"
	case "mem":
		return "nothing stays: the store lives in this process"
	}
	return "locks are released; see the backend's package doc for what else stays"
}

package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestFlagConventions: -h is a request, not an error (main exits 0 on
// flag.ErrHelp); a --run that matches no check and a flag the chosen
// protocol ignores are usage errors (exit 2), before any store is opened.
func TestFlagConventions(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	stderr := os.Stderr
	os.Stderr = devnull // the flag package prints usage there
	defer func() { os.Stderr = stderr }()
	ctx := context.Background()
	cmds := map[string]func(context.Context, []string) error{
		"demo": runDemo, "demo election": runDemoElection, "inspect": runInspect, "conformance": runConformance, "lostupdates": runLostUpdates, "bench": runBench, "compare": runCompare, "torture": runTorture,
	}
	for name, run := range cmds {
		if err := run(ctx, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s -h: got %v, want flag.ErrHelp (exit 0)", name, err)
		}
	}
	var ue usageError
	for _, args := range [][]string{{"name"}, {"--url", "mem://x"}, {"--url", "mem://x", "--watch", "-1s", "n"}, {"--nosuchflag"}} {
		if err := runInspect(ctx, args); !errors.As(err, &ue) {
			t.Errorf("inspect %v: got %v, want a usage error", args, err)
		}
	}
	if err := runDemoElection(ctx, []string{"extra"}); !errors.As(err, &ue) {
		t.Errorf("demo election extra: got %v, want a usage error", err)
	}
	if err := runConformance(ctx, []string{"--url", "mem://x", "--run", "NoSuchCheck"}); !errors.As(err, &ue) {
		t.Errorf("conformance --run NoSuchCheck: got %v, want a usage error", err)
	}
	for _, args := range [][]string{{"--duration", "0s"}, {"--clients", "-1"}, {"extra"}, {"--seed", "x"}} {
		if err := runTorture(ctx, append([]string{"--url", "mem://x"}, args...)); !errors.As(err, &ue) {
			t.Errorf("torture %v: got %v, want a usage error", args, err)
		}
	}
	for _, args := range [][]string{{"--profile", "study", "--stall", "0.05"}, {"--profile", "overlap", "--ttl", "1s"}} {
		if err := runLostUpdates(ctx, append([]string{"--url", "mem://x"}, args...)); !errors.As(err, &ue) {
			t.Errorf("lostupdates %v: got %v, want a usage error", args, err)
		}
	}
}

// TestConformanceReports: --format json and junit write one record per
// check that ran, with outcomes that add up, and the backend's declared
// capabilities; the lines per check go to stderr, not into the report.
func TestConformanceReports(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	stderr := os.Stderr
	os.Stderr = devnull
	defer func() { os.Stderr = stderr }()
	ctx := context.Background()
	args := []string{"--url", "mem://reports", "--run", "Fence"}

	out, err := capture(t, func() error { return runConformance(ctx, append(args, "--format", "json")) })
	if err != nil {
		t.Fatalf("--format json: %v\n%s", err, out)
	}
	var r jsonReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("--format json is not one JSON document: %v\n%s", err, out)
	}
	if r.Backend != "mem" || r.Capabilities.Fence != "strict" || len(r.Checks) < 2 || r.Passed+r.Failed+r.Skipped+r.NA != len(r.Checks) || r.Failed != 0 {
		t.Fatalf("json report: %+v", r)
	}
	for _, c := range r.Checks {
		if !strings.Contains(c.Name, "Fence") || c.Outcome == "" {
			t.Fatalf("json report: check %+v", c)
		}
	}

	out, err = capture(t, func() error { return runConformance(ctx, append(args, "--format", "junit")) })
	if err != nil {
		t.Fatalf("--format junit: %v\n%s", err, out)
	}
	var j junitSuites
	if err := xml.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("--format junit is not XML: %v\n%s", err, out)
	}
	if len(j.Suites) != 1 || j.Suites[0].Tests != len(r.Checks) || len(j.Suites[0].Cases) != len(r.Checks) || j.Suites[0].Failures != 0 {
		t.Fatalf("junit report: %+v", j)
	}
	var props []string
	for _, p := range j.Suites[0].Properties {
		props = append(props, p.Name+"="+p.Value)
	}
	if !slices.Contains(props, "backend=mem") || !slices.Contains(props, "fence=strict") {
		t.Fatalf("junit properties %v: want the backend's capabilities", props)
	}
}

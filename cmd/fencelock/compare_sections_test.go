package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/conformance"
)

// sectionRow returns the table row of md whose first cell is label.
func sectionRow(t *testing.T, md, heading, label string) string {
	t.Helper()
	_, sec, ok := strings.Cut(md, heading)
	if !ok {
		t.Fatalf("no %q section in:\n%s", heading, md)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	for _, line := range strings.Split(sec, "\n") {
		if strings.HasPrefix(line, "| "+label+" |") {
			return line
		}
	}
	t.Fatalf("section %q has no row for %q:\n%s", heading, label, sec)
	return ""
}

// TestCompareDocElection renders the election section from fixed results
// and checks each row's cells: median and worst of the runs, the TTL and
// why it is not the one asked, the paused leader's outcome, a failure,
// and the peers' sentences.
func TestCompareDocElection(t *testing.T) {
	ms := time.Millisecond
	d := &compareDoc{cfg: compareConfig{failoverRuns: 5, failoverTTL: 500 * ms}, results: []backendResult{
		{label: "redis", url: "redis://x", failover: failoverResult{ttl: 500 * ms, runs: []time.Duration{415 * ms, 417 * ms, 414 * ms, 416 * ms, 415 * ms},
			paused: pausedOutcome{oldTerm: 10, newTerm: 12, replacedAfter: 503 * ms}}},
		{label: "etcd", url: "etcd://x", failover: failoverResult{ttl: 2 * time.Second, runs: []time.Duration{1920 * ms, 1950 * ms, 1900 * ms}}},
		{label: "zookeeper", url: "zk://x", failover: failoverResult{ttl: 4 * time.Second, runs: []time.Duration{3900 * ms}, err: errors.New("leader process exited before leading"),
			paused: pausedOutcome{oldTerm: 3, newTerm: 4}, pausedErr: errors.New("the paused leader's write with term 3 was not refused: <nil>")}},
		{label: "dynamodb", err: errFake},
	}}
	var b bytes.Buffer
	d.renderElection(&b)
	md := b.String()
	for label, want := range map[string][]string{
		"redis":     {"| 500ms |", "415ms / 417ms (5 runs)", "replaced 503ms after it was elected (term 10 → 12); its write with term 10 **refused**"},
		"etcd":      {"2s (the store's minimum)", "1.92s / 1.95s (3 runs)"},
		"zookeeper": {"4s (the store's minimum session)", "3.9s / 3.9s (1 runs); then failed: leader process exited", "**FAILED**: the paused leader's write with term 3 was not refused"},
		"dynamodb":  {"not measured: " + errFake.Error()},
	} {
		row := sectionRow(t, md, "## Leader election: failover", label)
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("%s row %q lacks %q", label, row, w)
			}
		}
	}
	for _, w := range []string{"client-go `leaderelection`", "does not guarantee that only one client is acting as leader", "etcd `concurrency.Election`", "median and worst of 5 runs",
		"the paused leader's write was refused on redis; not measured or failed on etcd, zookeeper, dynamodb"} {
		if !strings.Contains(md, w) {
			t.Errorf("election section lacks %q", w)
		}
	}

	d.cfg.failoverRuns = 0
	b.Reset()
	d.renderElection(&b)
	if !strings.Contains(b.String(), "`--failover-runs 0`") || strings.Contains(b.String(), "|") {
		t.Errorf("with --failover-runs 0 the section should say it was not measured, with no table:\n%s", b.String())
	}
}

// TestCompareDocTorture renders the torture section from fixed results:
// operations, faults by kind, violations (none, some, and a declared
// weaker guarantee), and the replay command with the seed.
func TestCompareDocTorture(t *testing.T) {
	o := conformance.TortureOptions{Duration: 30 * time.Second, Seed: 24, Workers: 6, Names: 3, TTL: 400 * time.Millisecond}
	d := &compareDoc{cfg: compareConfig{torture: 30 * time.Second, tortureSeed: 24}, results: []backendResult{
		{label: "redis", url: "redis://x", torture: tortureRun{ops: 5000, faults: map[string]int{"reset": 3, "blackhole": 2, "latency": 1}, elapsed: 33 * time.Second, replay: tortureReplay("redis://…", o)}},
		{label: "pgadvisory", url: "postgres://x", torture: tortureRun{ops: 800, faults: map[string]int{"reset": 1}, allowed: 75 * time.Millisecond, elapsed: 31 * time.Second, replay: tortureReplay("postgres://…", o)}},
		{label: "etcd", url: "etcd://x", torture: tortureRun{ops: 90, faults: map[string]int{}, elapsed: 30 * time.Second,
			violations: []conformance.Violation{{Check: "overlap"}, {Check: "overlap"}, {Check: "fence"}}, replay: tortureReplay("etcd://…", o)}},
		{label: "zookeeper", url: "zk://x", torture: tortureRun{err: errors.New("zk://x: dial: refused"), replay: tortureReplay("zk://…", o)}},
		{label: "dynamodb", err: errFake},
	}}
	var b bytes.Buffer
	d.renderTorture(&b)
	md := b.String()
	for label, want := range map[string][]string{
		"redis":      {"5000 in 33s", "6: 2 blackhole, 1 latency, 3 reset", "| 0 |", "`fencelock torture --url 'redis://…' --duration 30s --seed 24 --clients 6 --names 3 --ttl 400ms`"},
		"pgadvisory": {"1: 1 reset", "0 (a declared weaker guarantee, BreakOverlap: two holders after a broken connection for up to 75ms"},
		"etcd":       {"| 0 |", "**3**: 1 fence, 2 overlap"},
		"zookeeper":  {"not run: zk://x: dial: refused"},
		"dynamodb":   {"not measured: " + errFake.Error()},
	} {
		row := sectionRow(t, md, "## Torture", label)
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("%s row %q lacks %q", label, row, w)
			}
		}
	}
	if !strings.Contains(md, "for 30s (seed 24)") {
		t.Errorf("torture section does not state its duration and seed:\n%s", md)
	}
}

// TestCompareFlags: the election and torture flags parse into the
// config, have the documented defaults, and bad values are usage errors.
func TestCompareFlags(t *testing.T) {
	cfg, _, _, err := parseCompareFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.failoverRuns != 5 || cfg.failoverTTL != 500*time.Millisecond || cfg.torture != 30*time.Second || cfg.tortureSeed != 24 {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, urls, out, err := parseCompareFlags([]string{"--failover-runs", "3", "--failover-ttl", "750ms", "--torture", "1m", "--torture-seed", "7", "--note", "on a shared machine", "--url", "mem://x", "--out", "-"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.failoverRuns != 3 || cfg.failoverTTL != 750*time.Millisecond || cfg.torture != time.Minute || cfg.tortureSeed != 7 || cfg.note != "on a shared machine" || len(urls) != 1 || *out != "-" {
		t.Errorf("parsed: %+v, urls %v, out %q", cfg, urls, *out)
	}
	for _, bad := range [][]string{{"--failover-runs", "-1"}, {"--failover-ttl", "0s"}, {"--torture", "-1s"}, {"--torture-seed", "0"}, {"--torture", "soon"}} {
		var ue usageError
		if _, _, _, err := parseCompareFlags(bad); !errors.As(err, &ue) {
			t.Errorf("%v: got %v, want a usage error", bad, err)
		}
	}
	if got := compareCommand([]string{"--note", "on a shared machine", "--peers", "", "--torture", "30s"}); got != "go run ./cmd/fencelock compare --note 'on a shared machine' --peers '' --torture 30s" {
		t.Errorf("compareCommand: %s", got)
	}
}

// TestMeasureFailoverMem runs the shared measurement on an in-process
// store: the paused leader is replaced with a higher term and its stale
// write refused, and every kill is followed by a new leader within a few
// TTLs (the kill ends the leader's lease without a release).
func TestMeasureFailoverMem(t *testing.T) {
	const ttl = 150 * time.Millisecond
	r := measureFailover(t.Context(), "mem://measure-failover-test", ttl, 2)
	if r.err != nil || r.pausedErr != nil {
		t.Fatalf("kill runs: %v; paused: %v", r.err, r.pausedErr)
	}
	if r.ttl != ttl || len(r.runs) != 2 {
		t.Fatalf("ttl %v, %d runs; want %v, 2", r.ttl, len(r.runs), ttl)
	}
	for i, took := range r.runs {
		if took <= 0 || took > 10*ttl {
			t.Errorf("run %d: new leader %v after the kill, want within (0, %v]", i, took, 10*ttl)
		}
	}
	if p := r.paused; p.newTerm <= p.oldTerm || p.replacedAfter < ttl/2 {
		t.Errorf("paused: term %d → %d after %v; want a higher term, after about the TTL", p.oldTerm, p.newTerm, p.replacedAfter)
	}
}

// TestDemoElectionRunsFlag: --runs must be positive (before any server
// is started).
func TestDemoElectionRunsFlag(t *testing.T) {
	var ue usageError
	if err := runDemoElection(t.Context(), []string{"--all", "--runs", "0"}); !errors.As(err, &ue) {
		t.Errorf("--runs 0: got %v, want a usage error", err)
	}
}

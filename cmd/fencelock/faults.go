package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/faultrec"
)

// faultPackages are the packages whose fault tests feed the table, and
// faultRun selects those tests: the backends' fault tests and, per
// backend, the conformance suite's process-crash and process-freeze checks.
var (
	faultPackages = []string{"./backends/memory", "./backends/redis", "./backends/redlock", "./backends/etcd",
		"./backends/zookeeper", "./backends/pgadvisory", "./backends/dynamodb"}
	faultRun = "^(TestFault.*|TestConformance|TestConformance5|TestLeaderKillWhileHeldAndQueued|TestPartitionedClientLosesLease" +
		"|TestConnectionLossDuringCreate|TestTerminatedHolder|TestFenceSurvivesServerCrash)$/^(ProcessCrash|ProcessFreeze)$"
	// faultRunURL selects the suite's partition checks where they run by
	// URL, through its fault proxies, on the stock server each backend's
	// tests start for it.
	faultRunURL = "^(TestConformanceByURL|TestURLHarness|TestConformanceStockEtcdByURL|TestConformanceStockByURL)$/^Partition(Blackhole|Reset)HolderEndsFirst$"
)

// faultBackends are the table's rows, in order: every backend the CLI
// registers (backends.go), by its Capabilities().Backend name.
var faultBackends = []string{"mem", "redis", "redlock", "etcd", "zookeeper", "pgadvisory", "dynamodb"}

// schemeBackend maps each URL scheme the CLI registers to its row.
var schemeBackend = map[string]string{
	"mem": "mem", "memrpc": "mem", "redis": "redis", "rediss": "redis", "redlock": "redlock", "etcd": "etcd",
	"zk": "zookeeper", "postgres": "pgadvisory", "postgresql": "pgadvisory", "dynamodb": "dynamodb",
}

var scenarioTitle = map[faultrec.Scenario]string{
	faultrec.HolderCrashed:     "holder crashed",
	faultrec.HolderPaused:      "holder paused past the TTL",
	faultrec.ServerRestarted:   "server restarted",
	faultrec.PrimaryLost:       "primary / leader lost",
	faultrec.ClientPartitioned: "client partitioned",
	faultrec.ClockJump:         "clock jump",
}

// untested says why a cell has no test where that is by design (n/a) or
// worth a reason; other empty cells read "not tested".
var untested = map[string]map[faultrec.Scenario]string{
	"mem": {
		faultrec.ServerRestarted:   "n/a: the store lives in the process that uses it",
		faultrec.PrimaryLost:       "n/a: one in-process store",
		faultrec.ClientPartitioned: "n/a: in-process, no network",
		faultrec.ClockJump:         "n/a: expiry on the process's monotonic clock",
	},
	"redis":      {faultrec.ClockJump: "not tested; applies: the server's wall clock expires keys and floors the fence"},
	"redlock":    {faultrec.ClockJump: "not tested; applies: each primary's wall clock expires its key and floors its fence counter"},
	"pgadvisory": {faultrec.PrimaryLost: "not tested: one server; advisory locks are not replicated to standbys", faultrec.ClockJump: "not tested"},
	"etcd":       {faultrec.ClockJump: "not tested"},
	"zookeeper":  {faultrec.ClockJump: "not tested"},
	"dynamodb":   {faultrec.ClockJump: "not tested; no server clock: each client judges expiry from its own observations; the first fence of a new item comes from the client's wall clock"},
}

// faultTable runs the fault tests with recording on (go test from the
// module root; servers are started by the tests themselves) and renders
// the "What happens when things break" section. A failing fault test does
// not fail the table: its cells say FAILED and the section lists it.
func faultTable(ctx context.Context) (string, error) {
	return faultSection(ctx, faultPackages, faultRun, faultRunURL)
}

// faultSection is faultTable for the given packages and -run patterns,
// one go test run each.
func faultSection(ctx context.Context, pkgs []string, runs ...string) (string, error) {
	var (
		cmds, failed []string
		all          []faultrec.Result
		took         time.Duration
	)
	for _, run := range runs {
		r, f, tk, err := runFaultTests(ctx, pkgs, run)
		if err != nil {
			return "", err
		}
		all, failed, took = append(all, r...), append(failed, f...), took+tk
		cmds = append(cmds, fmt.Sprintf("`go test -count=1 -run '%s' %s`", run, strings.Join(pkgs, " ")))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Measured by the fault tests in one run of %s on %s (%v), servers started by the tests.\n\n",
		strings.Join(cmds, " and "), time.Now().UTC().Format("2006-01-02"), took.Round(time.Second))
	b.WriteString(renderFaultTable(all))
	if len(failed) > 0 {
		fmt.Fprintf(&b, "\nFailed in this run: %s.\n", strings.Join(failed, ", "))
	}
	return b.String(), nil
}

// runFaultTests runs go test -run run on pkgs (relative to the module
// root) with $FENCELOCK_FAULTS_OUT set, and returns the records, the tests
// that failed, and how long the run took. An error means go test did not
// run the tests (a build failure, a missing go tool), not that one failed.
func runFaultTests(ctx context.Context, pkgs []string, run string) (recs []faultrec.Result, failed []string, took time.Duration, err error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	f, err := os.CreateTemp("", "fencelock-faults-*.jsonl")
	if err != nil {
		return nil, nil, 0, err
	}
	out := f.Name()
	_ = f.Close()
	defer os.Remove(out)
	args := append([]string{"test", "-count=1", "-json", "-run", run}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), faultrec.OutEnv+"="+out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	fmt.Fprintf(os.Stderr, "compare: fault tests: go %s\n", strings.Join(args, " "))
	start := time.Now()
	stdout, runErr := cmd.Output()
	took = time.Since(start)
	failed = failedTests(stdout)
	if runErr != nil && len(failed) == 0 {
		return nil, nil, took, fmt.Errorf("go test of the fault tests: %v\n%s", runErr, tail(stderr.String(), 2000))
	}
	recs, err = faultrec.ReadFile(out)
	return recs, failed, took, err
}

// faultTableFrom renders a saved record file (what $FENCELOCK_FAULTS_OUT
// collected), for `--faults-from FILE`.
func faultTableFrom(file string) (string, error) {
	recs, err := faultrec.ReadFile(file)
	if err != nil {
		return "", err
	}
	return renderFaultTable(recs), nil
}

// renderFaultTable renders the records as a markdown table, one row per
// backend in faultBackends (and any other backend recorded), one column per
// scenario, followed by a legend and the numbered details the cells refer
// to. Cell links are relative to docs/.
func renderFaultTable(records []faultrec.Result) string {
	cells := map[string]map[faultrec.Scenario][]faultrec.Result{}
	rows := slices.Clone(faultBackends)
	for _, r := range records {
		if r.Outcome == "" && !r.Failed {
			continue // skipped before it measured anything
		}
		b := rowOf(r.Backend)
		if !slices.Contains(rows, b) {
			rows = append(rows, b)
		}
		if cells[b] == nil {
			cells[b] = map[faultrec.Scenario][]faultrec.Result{}
		}
		cells[b][r.Scenario] = append(cells[b][r.Scenario], r)
	}
	var t, notes strings.Builder
	t.WriteString("| backend |")
	for _, s := range faultrec.Scenarios() {
		fmt.Fprintf(&t, " %s |", scenarioTitle[s])
	}
	t.WriteString("\n|---|" + strings.Repeat("---|", len(faultrec.Scenarios())) + "\n")
	n := 0
	for _, b := range rows {
		fmt.Fprintf(&t, "| %s |", b)
		for _, s := range faultrec.Scenarios() {
			rs := cells[b][s]
			if len(rs) == 0 {
				why := untested[b][s]
				if why == "" {
					why = "not tested"
				}
				fmt.Fprintf(&t, " %s |", why)
				continue
			}
			slices.SortStableFunc(rs, func(x, y faultrec.Result) int { return strings.Compare(x.File+x.Test, y.File+y.Test) })
			var parts []string
			for _, r := range rs {
				p := cell(r)
				if r.Note != "" {
					n++
					p += fmt.Sprintf(" [%d]", n)
					fmt.Fprintf(&notes, "%d. %s, %s: %s\n", n, b, shortTest(r.Test), r.Note)
				}
				parts = append(parts, p)
			}
			fmt.Fprintf(&t, " %s |", strings.Join(parts, "<br>"))
		}
		t.WriteString("\n")
	}
	t.WriteString("\nEach cell, per test: what became of the lease held when the fault hit (**kept**, **lost**; **refused** / **granted**: no lease was held and the store refused / kept granting); " +
		"how long until another client was granted the lock (next grant), counted from the event named; whether the next grant's fence was above every earlier one (fence ↑) or not (fence NOT ↑); " +
		"whether the test looked for a second holder — a grant before the earlier lease ended, or a stale holder's fenced write accepted — and saw none (1 holder) or one (2 HOLDERS); and the test that measured it. " +
		"**FAILED**: the test failed in this run; its values are what it measured before failing. Numbers are from one run on a loaded 2-core machine: timings vary between runs.\n")
	if notes.Len() > 0 {
		t.WriteString("\n" + notes.String())
	}
	return t.String()
}

// cell renders one record: outcome · waiter · fence · second holder · link.
func cell(r faultrec.Result) string {
	var p []string
	if r.Failed {
		p = append(p, "**FAILED**")
	}

	if r.Outcome != "" {
		p = append(p, "**"+string(r.Outcome)+"**")
	}
	if r.WaitFrom != "" {
		p = append(p, "next grant "+us(r.WaitGranted)+" after "+r.WaitFrom)
	}
	switch r.Fence {
	case faultrec.FenceIncreased:
		p = append(p, "fence ↑")
	case faultrec.FenceRepeated:
		p = append(p, "fence NOT ↑")
	}
	switch r.SecondHolder {
	case faultrec.OverlapNone:
		p = append(p, "1 holder")
	case faultrec.OverlapFound:
		p = append(p, "2 HOLDERS")
	case faultrec.OverlapDeclared:
		p = append(p, "2 holders within the declared BreakOverlap")
	}
	p = append(p, fmt.Sprintf("[%s](%s)", shortTest(r.Test), testLink(r)))
	if r.Case != "" {
		return r.Case + ": " + strings.Join(p, " · ")
	}
	return strings.Join(p, " · ")
}

// rowOf maps a recorded backend name to its row (memrpc:// is mem's
// served form).
func rowOf(backend string) string {
	if backend == "memrpc" {
		return "mem"
	}
	return backend
}

// shortTest drops the conformance runner's top-level test name.
func shortTest(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return name
}

// testLink is the record's file and line relative to docs/.
func testLink(r faultrec.Result) string {
	l := path.Join("..", r.File)
	if r.Line > 0 {
		l += fmt.Sprintf("#L%d", r.Line)
	}
	return l
}

// failedTests lists the tests (and packages) that failed in go test -json
// output.
func failedTests(out []byte) []string {
	var failed []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var ev struct{ Action, Package, Test string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Action != "fail" {
			continue
		}
		name := path.Base(ev.Package)
		if ev.Test != "" {
			name += "." + ev.Test
		}
		failed = append(failed, name)
	}
	return failed
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("the fault table runs the fault tests with go test: run it from the fencelock module")
	}
	return filepath.Dir(mod), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

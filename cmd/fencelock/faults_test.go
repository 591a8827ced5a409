package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/faultrec"
)

// Every scheme the CLI registers maps to a row, and every row is in the
// table, with a cell per scenario, even with no records at all.
func TestFaultTableHasEveryBackend(t *testing.T) {
	for _, s := range fencelock.Schemes() {
		b, ok := schemeBackend[s]
		if !ok {
			t.Errorf("scheme %s registered by the CLI has no row in the fault table (schemeBackend)", s)
			continue
		}
		if !slices.Contains(faultBackends, b) {
			t.Errorf("scheme %s maps to %s, not a row of faultBackends", s, b)
		}
	}
	md := renderFaultTable(nil)
	for _, b := range faultBackends {
		row := rowLine(t, md, b)
		if got := strings.Count(row, "|"); got != len(faultrec.Scenarios())+2 {
			t.Errorf("row %q has %d cells, want %d", row, got-1, len(faultrec.Scenarios())+1)
		}
	}
	if !strings.Contains(rowLine(t, md, "redis"), "| not tested |") {
		t.Errorf("a cell with no record does not say not tested:\n%s", md)
	}
}

func rowLine(t *testing.T, md, backend string) string {
	t.Helper()
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "| "+backend+" |") {
			return l
		}
	}
	t.Fatalf("no row for %s in\n%s", backend, md)
	return ""
}

func TestFaultTableCells(t *testing.T) {
	recs := []faultrec.Result{
		{Backend: "memrpc", Scenario: faultrec.HolderCrashed, Outcome: faultrec.Lost, WaitGranted: 405 * time.Millisecond, WaitFrom: "SIGKILL",
			Fence: faultrec.FenceIncreased, Test: "TestConformanceRPC/ProcessCrash", File: "conformance/crash_linux.go", Line: 33, Note: "TTL 400ms"},
		{Backend: "redis", Scenario: faultrec.ServerRestarted, Outcome: faultrec.Lost, Fence: faultrec.FenceRepeated,
			SecondHolder: faultrec.OverlapFound, Test: "TestFaultRestartEmpty", File: "backends/redis/fault_test.go", Line: 132, Failed: true},
		{Backend: "redis", Scenario: faultrec.ServerRestarted, Case: "from its data", Outcome: faultrec.Kept, SecondHolder: faultrec.OverlapNone,
			Test: "TestAnother", File: "backends/redis/x_test.go", Line: 7},
		{Backend: "etcd", Scenario: faultrec.PrimaryLost, Test: "TestSkipped", File: "backends/etcd/fault_test.go", Line: 9}, // skipped: no outcome
		{Backend: "newstore", Scenario: faultrec.ClockJump, Outcome: faultrec.Kept, Test: "TestClock", File: "backends/newstore/clock_test.go", Line: 1},
	}
	md := renderFaultTable(recs)
	mem := rowLine(t, md, "mem")
	if !strings.Contains(mem, "**lost** · next grant 405.0ms after SIGKILL · fence ↑ · [ProcessCrash](../conformance/crash_linux.go#L33) [1]") {
		t.Errorf("mem row: %s", mem)
	}
	if !strings.Contains(md, "1. mem, ProcessCrash: TTL 400ms") {
		t.Errorf("note missing:\n%s", md)
	}
	redis := rowLine(t, md, "redis")
	if !strings.Contains(redis, "**FAILED** · **lost** · fence NOT ↑ · 2 HOLDERS · [TestFaultRestartEmpty](../backends/redis/fault_test.go#L132)<br>from its data: **kept** · 1 holder · [TestAnother](../backends/redis/x_test.go#L7)") {
		t.Errorf("redis row: %s", redis)
	}
	if strings.Contains(md, "TestSkipped") {
		t.Errorf("a record without an outcome (a skipped test) was rendered:\n%s", md)
	}
	if !strings.Contains(rowLine(t, md, "newstore"), "[TestClock]") {
		t.Errorf("a recorded backend outside faultBackends got no row:\n%s", md)
	}
}

func TestFaultTableFromFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "faults.jsonl")
	line := `{"backend":"dynamodb","scenario":"holder-paused","outcome":"lost","wait_granted_ns":1500000000,"wait_from":"SIGSTOP","fence":"increased","second_holder":"none","test":"TestFaultHolderFrozen","file":"backends/dynamodb/fault_test.go","line":190}` + "\n"
	if err := os.WriteFile(f, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	md, err := faultTableFrom(f)
	if err != nil {
		t.Fatal(err)
	}
	if row := rowLine(t, md, "dynamodb"); !strings.Contains(row, "**lost** · next grant 1.50s after SIGSTOP · fence ↑ · 1 holder · [TestFaultHolderFrozen](../backends/dynamodb/fault_test.go#L190)") {
		t.Errorf("dynamodb row: %s", row)
	}
}

func TestFailedTests(t *testing.T) {
	out := `{"Action":"run","Package":"github.com/fencelock/fencelock/backends/redis","Test":"TestFaultX"}
{"Action":"fail","Package":"github.com/fencelock/fencelock/backends/redis","Test":"TestFaultX"}
{"Action":"pass","Package":"github.com/fencelock/fencelock/backends/etcd","Test":"TestY"}
{"Action":"fail","Package":"github.com/fencelock/fencelock/backends/redis"}
not json
`
	if got := failedTests([]byte(out)); !slices.Equal(got, []string{"redis.TestFaultX", "redis"}) {
		t.Fatalf("failedTests = %q", got)
	}
}

// The whole path on the cheapest fault test: go test runs the mem
// backend's process-crash check with recording on, and its record lands in
// the mem row, linked to the check.
func TestFaultSectionRunsTests(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs go test on the mem backend")
	}
	md, err := faultSection(t.Context(), []string{"./backends/memory"}, "^TestConformance$/^ProcessCrash$")
	if err != nil {
		t.Fatal(err)
	}
	row := rowLine(t, md, "mem")
	if !strings.Contains(row, "**lost** · next grant ") || !strings.Contains(row, "after SIGKILL · fence ↑ · [ProcessCrash](../conformance/crash_linux.go#L") {
		t.Fatalf("mem row after a real run: %s\n%s", row, md)
	}
	if strings.Contains(md, "Failed in this run") {
		t.Fatalf("the crash check failed:\n%s", md)
	}
}

// Package faultrec records what the fault tests measured, one JSON line per
// observation, so that `fencelock compare` can render the "What happens when
// things break" table of docs/comparison.md from a real run instead of from
// prose.
//
// A fault test calls Record with the values it measured and asserted (never
// constants). Recording is off unless the environment variable named by
// OutEnv names a file; then each record is appended to it as a single
// write on a file opened with O_APPEND, so test binaries of several
// packages running in parallel can share the file.
package faultrec

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// OutEnv names the environment variable that holds the file records are
// appended to. Unset or empty: Record does nothing.
const OutEnv = "FENCELOCK_FAULTS_OUT"

// Scenario is a column of the table: the kind of fault.
type Scenario string

// The scenarios, in table order.
const (
	HolderCrashed     Scenario = "holder-crashed"     // the holder's process killed (SIGKILL), no release
	HolderPaused      Scenario = "holder-paused"      // the holder's process frozen (SIGSTOP) past its TTL
	ServerRestarted   Scenario = "server-restarted"   // the (or a) server killed and restarted, empty or from its data
	PrimaryLost       Scenario = "primary-lost"       // a primary, the leader or a majority lost, or the only server frozen
	ClientPartitioned Scenario = "client-partitioned" // the holder's client cut off from the store (a paused proxy)
	ClockJump         Scenario = "clock-jump"         // a wall clock stepped
)

// Scenarios lists the scenarios in table order (a new slice each call).
func Scenarios() []Scenario {
	return []Scenario{HolderCrashed, HolderPaused, ServerRestarted, PrimaryLost, ClientPartitioned, ClockJump}
}

// Outcome is what became of the lease held when the fault hit.
type Outcome string

const (
	Kept    Outcome = "kept"    // the holder still held it, renewing, after the fault
	Lost    Outcome = "lost"    // the holder's lease ended (Done, ErrLeaseLost)
	Refused Outcome = "refused" // no lease was held; the store refused new ones (unavailable)
	Granted Outcome = "granted" // no lease was held; the store kept granting during the fault
)

// Fence says whether the first grant after the fault had a fence above
// every earlier one.
type Fence string

const (
	FenceNA        Fence = ""              // no grant to compare, or the backend does not fence
	FenceIncreased Fence = "increased"     // strictly above the last fence before the fault
	FenceRepeated  Fence = "not increased" // equal to or below an earlier fence
)

// FenceOf compares the fence of a grant after the fault with the last one
// before it.
func FenceOf(before, after driver.Fence) Fence {
	if after > before {
		return FenceIncreased
	}
	return FenceRepeated
}

// Overlap is whether the test saw two holders at once.
type Overlap string

const (
	OverlapNA    Overlap = ""     // the test does not look for one
	OverlapNone  Overlap = "none" // it looked and saw none
	OverlapFound Overlap = "seen" // it saw two holders (a failure, unless the test shows a store's known gap)
	// OverlapDeclared: it saw two holders for no longer than the backend
	// declares it may (Capabilities.BreakOverlap).
	OverlapDeclared Overlap = "declared"
)

// OverlapOf maps "two holders seen" to an Overlap.
func OverlapOf(seen bool) Overlap {
	if seen {
		return OverlapFound
	}
	return OverlapNone
}

// Result is one observation of one fault test.
type Result struct {
	Backend  string   `json:"backend"` // Capabilities().Backend: "mem", "redis", ...
	Scenario Scenario `json:"scenario"`
	// Case names the variant in a few words when a test or a cell has
	// several ("2 of 5 killed", "fence_flush=false", "TTL 400ms").
	Case    string  `json:"case,omitempty"`
	Outcome Outcome `json:"outcome"`
	// WaitGranted is how long after WaitFrom a waiting client was granted
	// the lock; meaningful only when WaitFrom is set.
	WaitGranted time.Duration `json:"wait_granted_ns,omitempty"`
	// WaitFrom names the event WaitGranted counts from ("SIGKILL",
	// "SIGSTOP", "release", "partition", ...); "" when no waiter was timed.
	WaitFrom string `json:"wait_from,omitempty"`
	Fence    Fence  `json:"fence,omitempty"`
	// SecondHolder is what the test saw of a second holder: a grant before
	// the earlier lease ended, or a stale holder's fenced write accepted.
	SecondHolder Overlap `json:"second_holder,omitempty"`
	Note         string  `json:"note,omitempty"` // what else the test measured, briefly

	// Filled by Record.
	Test   string `json:"test"`             // t.Name()
	File   string `json:"file"`             // the calling function's file, relative to the module root ("backends/redis/fault_test.go")
	Line   int    `json:"line"`             // the first line of the calling function (the test)
	Failed bool   `json:"failed,omitempty"` // the test had failed by its end
}

// TB is the part of testing.TB Record needs (the conformance suite's TB
// has it too).
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Failed() bool
}

// Begin starts a record for the calling test: the test fills in the
// returned Result as it measures, and the record is appended, as by Record,
// when the test ends, also when it fails half-way (Failed then says so and
// the fields hold what was measured until then). The file and line are
// those of the function that calls Begin. Without $FENCELOCK_FAULTS_OUT it returns a Result that
// is never written.
func Begin(t TB, r Result) *Result {
	t.Helper()
	rec := &r
	path := os.Getenv(OutEnv)
	if path == "" {
		return rec
	}
	rec.Test = t.Name()
	rec.File, rec.Line = caller(2)
	t.Cleanup(func() { write(path, t, *rec) })
	return rec
}

// Record appends r, with the test's name and the file and first line of
// the function that calls Record, to the file named by
// $FENCELOCK_FAULTS_OUT when the test ends (so that Failed covers the
// test's later assertions). It does nothing when the variable is unset.
// A write error is reported on stderr, never as a test failure: recording
// must not change what the test asserts.
func Record(t TB, r Result) {
	t.Helper()
	path := os.Getenv(OutEnv)
	if path == "" {
		return
	}
	r.Test = t.Name()
	r.File, r.Line = caller(2)
	t.Cleanup(func() { write(path, t, r) })
}

// Caller returns the file (relative to the module root) and the first line
// of the function skip frames up from its caller (0: the caller itself).
// A shared scenario (internal/faulttest) sets a record's File and Line
// with it, so that the record links to the backend's test that ran it.
func Caller(skip int) (string, int) { return caller(skip + 2) }

// caller returns the file (relative to the module root) and the first
// line of the function skip frames up (runtime.Caller's count): for Begin
// and Record, 2 is the test (or conformance check) the record links to.
func caller(skip int) (string, int) {
	pc, file, line, ok := runtime.Caller(skip)
	if !ok {
		return "", 0
	}
	if f := runtime.FuncForPC(pc); f != nil {
		if ff, fl := f.FileLine(f.Entry()); ff == file && fl > 0 && fl <= line {
			line = fl
		}
	}
	return relToModule(file), line
}

func write(path string, t TB, r Result) {
	r.Failed = t.Failed()
	if err := appendLine(path, r); err != nil {
		fmt.Fprintf(os.Stderr, "faultrec: %v\n", err)
	}
}

func appendLine(path string, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n')) // one write: lines never interleave
	return errors.Join(err, f.Close())
}

const modulePath = "github.com/fencelock/fencelock"

// relToModule returns file relative to the nearest directory above it that
// holds a go.mod (the module root), or file itself if there is none.
func relToModule(file string) string {
	if !filepath.IsAbs(file) { // built with -trimpath: module path + "/" + file
		return strings.TrimPrefix(file, modulePath+"/")
	}
	for dir := filepath.Dir(file); ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if rel, err := filepath.Rel(dir, file); err == nil {
				return filepath.ToSlash(rel)
			}
			return file
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return file
		}
		dir = parent
	}
}

// Read parses records written by Record: one JSON object a line; blank
// lines are skipped.
func Read(r io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var res Result
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return out, fmt.Errorf("faultrec: line %d: %w", n, err)
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

// ReadFile is Read on the file at path.
func ReadFile(path string) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f)
}

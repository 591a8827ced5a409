package faultrec_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/faultrec"
)

// fakeT runs cleanups on demand, so a test can look at the file after the
// "test" it stands for has ended.
type fakeT struct {
	name     string
	failed   bool
	cleanups []func()
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Name() string      { return f.name }
func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Failed() bool      { return f.failed }
func (f *fakeT) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestRecordWritesAtTestEnd(t *testing.T) {
	out := filepath.Join(t.TempDir(), "faults.jsonl")
	t.Setenv(faultrec.OutEnv, out)
	ft := &fakeT{name: "TestX/sub"}
	r0 := faultrec.Result{Backend: "redis", Scenario: faultrec.HolderCrashed, Outcome: faultrec.Lost,
		WaitGranted: 1234 * time.Millisecond, WaitFrom: "SIGKILL", Fence: faultrec.FenceOf(7, 9), Note: "n"}
	faultrec.Record(ft, r0)
	line := funcLine(t, "TestRecordWritesAtTestEnd")
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("record written before the test ended (stat: %v)", err)
	}
	ft.failed = true // a later assertion failed
	ft.end()
	rs, err := faultrec.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d records, want 1", len(rs))
	}
	r := rs[0]
	want := faultrec.Result{Backend: "redis", Scenario: faultrec.HolderCrashed, Outcome: faultrec.Lost,
		WaitGranted: 1234 * time.Millisecond, WaitFrom: "SIGKILL", Fence: faultrec.FenceIncreased, Note: "n",
		Test: "TestX/sub", File: "internal/faultrec/faultrec_test.go", Line: line, Failed: true}
	if r != want {
		t.Fatalf("record\n%+v\nwant\n%+v", r, want)
	}
}

func TestBeginWritesWhatWasMeasured(t *testing.T) {
	out := filepath.Join(t.TempDir(), "faults.jsonl")
	t.Setenv(faultrec.OutEnv, out)
	ft := &fakeT{name: "TestZ"}
	rec := faultrec.Begin(ft, faultrec.Result{Backend: "zookeeper", Scenario: faultrec.ClientPartitioned})
	rec.Outcome = faultrec.Lost
	rec.SecondHolder = faultrec.OverlapOf(false)
	ft.end()
	rs, err := faultrec.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Outcome != faultrec.Lost || rs[0].SecondHolder != faultrec.OverlapNone || rs[0].Test != "TestZ" || rs[0].Failed {
		t.Fatalf("records %+v", rs)
	}
}

func TestRecordNoOpWhenUnset(t *testing.T) {
	t.Setenv(faultrec.OutEnv, "")
	dir := t.TempDir()
	ft := &fakeT{name: "TestY"}
	faultrec.Record(ft, faultrec.Result{Backend: "mem"})
	faultrec.Begin(ft, faultrec.Result{Backend: "mem"}).Outcome = faultrec.Kept
	if len(ft.cleanups) != 0 {
		t.Fatalf("Record registered %d cleanups with %s unset", len(ft.cleanups), faultrec.OutEnv)
	}
	ft.end()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("files written: %v", ents)
	}
}

// Many writers (as parallel test binaries would be) never interleave lines.
func TestRecordConcurrentAppends(t *testing.T) {
	out := filepath.Join(t.TempDir(), "faults.jsonl")
	t.Setenv(faultrec.OutEnv, out)
	const n = 64
	note := strings.Repeat("x", 3000) // bigger than a pipe's atomic write, smaller than a page cache write
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ft := &fakeT{name: "T"}
			faultrec.Record(ft, faultrec.Result{Backend: "etcd", Line: i, Note: note})
			ft.end()
		})
	}
	wg.Wait()
	rs, err := faultrec.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != n {
		t.Fatalf("%d records, want %d", len(rs), n)
	}
	for _, r := range rs {
		if r.Note != note || r.Backend != "etcd" {
			t.Fatalf("a record was mangled: %+v", r)
		}
	}
}

func TestReadRejectsGarbage(t *testing.T) {
	if _, err := faultrec.Read(strings.NewReader("{\"backend\":\"mem\"}\n\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("Read of a bad line: %v, want an error naming line 3", err)
	}
}

func TestFenceOf(t *testing.T) {
	if faultrec.FenceOf(5, 6) != faultrec.FenceIncreased || faultrec.FenceOf(6, 6) != faultrec.FenceRepeated || faultrec.FenceOf(7, 6) != faultrec.FenceRepeated {
		t.Fatal("FenceOf")
	}
}

// funcLine is the line of "func name(" in this file: where a record made
// in that test must link.
func funcLine(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile("faultrec_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "func "+name+"(") {
			return i + 1
		}
	}
	t.Fatalf("func %s not found", name)
	return 0
}

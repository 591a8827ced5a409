package conformance

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
)

type memHarness struct{ s *memory.Store }

func (h memHarness) MakeClient(_ context.Context, o *fencelock.Options) (*fencelock.Client, error) {
	return memory.New(h.s, nil, o)
}
func (memHarness) URL() string { return "" }
func (memHarness) Close()      {}

func newMem(context.Context, TB) (Harness, error) { return memHarness{memory.NewStore()}, nil }

// A check blocked on a lock that is never released fails at its deadline,
// naming what it waited for, with the goroutines, and its blocking call
// returns because its ctx is cancelled.
func TestDeadlineFailsHungCheck(t *testing.T) {
	c := check{name: "Hung", ttls: 1, run: func(t TB, e *env) {
		a, b := e.client(), e.client()
		_, err := a.TryAcquire(e.ctx, "x", opts(longTTL, true))
		mustNil(t, err, "TryAcquire")
		e.waiting("a release that never comes")
		_, err = b.Acquire(e.ctx, "x", nil)
		mustIs(t, err, context.Canceled, "Acquire at the deadline")
	}}
	r := &runT{name: c.name}
	start := time.Now()
	timedOut := runCheck(t.Context(), c, r, &RunOptions{BaseDeadline: time.Second}, newMem)
	took := time.Since(start)
	if !timedOut || r.outcome() != "fail" {
		t.Fatalf("timedOut %v, outcome %s: want a failure at the deadline", timedOut, r.outcome())
	}
	d := r.detail()
	t.Logf("the report:\n%s", d)
	for _, want := range []string{"DEADLINE", "1.4s deadline", "waiting for a release that never comes", "goroutines running fencelock code", "conformance.TestDeadlineFailsHungCheck"} {
		if !strings.Contains(d, want) {
			t.Errorf("report lacks %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "abandoned") {
		t.Errorf("the check's Acquire did not return when its ctx was cancelled:\n%s", d)
	}
	// 1s base + 1×400ms, and the check returns at once when cancelled.
	if took < 1400*time.Millisecond || took > 3*time.Second {
		t.Errorf("runCheck returned after %v; want just past the 1.4s deadline", took)
	}
}

// A check that ignores its ctx is abandoned after the grace period: the
// runner moves on.
func TestDeadlineAbandonsCheckIgnoringCtx(t *testing.T) {
	old := deadlineGrace
	deadlineGrace = 200 * time.Millisecond
	defer func() { deadlineGrace = old }()
	release := make(chan struct{})
	defer close(release)
	c := check{name: "Deaf", ttls: 1, run: func(t TB, e *env) {
		e.waiting("a channel nobody closes")
		<-release
	}}
	r := &runT{name: c.name}
	start := time.Now()
	if !runCheck(t.Context(), c, r, &RunOptions{BaseDeadline: 500 * time.Millisecond}, newMem) {
		t.Fatalf("no deadline reported")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("runCheck returned after %v; want about 0.9s deadline + 0.2s grace", took)
	}
	if d := r.detail(); !strings.Contains(d, "abandoned") || !strings.Contains(d, "a channel nobody closes") {
		t.Errorf("report: %s", d)
	}
}

// RunWith runs exactly the checks selected.
func TestRunWithOptionsSelectChecks(t *testing.T) {
	res := RunWith(t.Context(), func(context.Context) (Harness, error) { return memHarness{memory.NewStore()}, nil },
		&RunOptions{Checks: []string{"TryAcquireFree", "DoubleRelease", "InvalidInput"}, Exclude: []string{"InvalidInput"}})
	if len(res) != 2 || res[0].Check != "TryAcquireFree" || res[1].Check != "DoubleRelease" {
		t.Fatalf("ran %v, want TryAcquireFree and DoubleRelease", res)
	}
	for _, r := range res {
		if r.Outcome != "pass" {
			t.Errorf("%s: %s %s", r.Check, r.Outcome, r.Detail)
		}
	}
}

// hungChildEnv makes this test binary, re-executed, run RunConformanceTests
// with a suite of one check that never returns on its own.
const hungChildEnv = "FENCELOCK_TEST_HUNG_CHILD"

func TestHungCheckChild(t *testing.T) {
	if os.Getenv(hungChildEnv) == "" {
		t.Skip("helper for TestRunConformanceTestsDoesNotHang")
	}
	checks = []check{{name: "Hung", ttls: 1, run: func(t TB, e *env) {
		a, b := e.client(), e.client()
		_, err := a.TryAcquire(e.ctx, "x", opts(longTTL, true))
		mustNil(t, err, "TryAcquire")
		e.waiting("a release that never comes")
		_, _ = b.Acquire(e.ctx, "x", nil)
	}}, {name: "After", run: func(t TB, e *env) { t.Logf("the run went on") }}}
	RunConformanceTests(t, func(context.Context, testing.TB) (Harness, error) { return memHarness{memory.NewStore()}, nil })
}

// RunConformanceTests with a hung check: the subtest fails at its deadline
// with the report, the next check runs, and go test returns.
func TestRunConformanceTestsDoesNotHang(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestHungCheckChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), hungChildEnv+"=1", BaseDeadlineEnv+"=1s")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("child: err %v after %v (want a failing exit, well before 30s)\n%s", err, took, out)
	}
	for _, want := range []string{"--- FAIL: TestHungCheckChild/Hung", "DEADLINE", "waiting for a release that never comes", "--- PASS: TestHungCheckChild/After", "the run went on"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
	if took > 15*time.Second {
		t.Errorf("child took %v with a 1.4s deadline", took)
	}
}

// A check that runs longer than RunOptions.Progress reports, while it
// runs, how long it has run and what it is waiting for.
func TestProgressLines(t *testing.T) {
	release := make(chan struct{})
	c := check{name: "Slow", ttls: 1, run: func(t TB, e *env) {
		e.waiting("the test to let go")
		<-release
	}}
	var out strings.Builder
	r := &runT{name: c.name}
	var mu lockedWriter
	mu.w = &out
	go func() {
		for !strings.Contains(mu.String(), "running: waiting for the test to let go") {
			time.Sleep(5 * time.Millisecond)
		}
		close(release)
	}()
	if runCheck(t.Context(), c, r, &RunOptions{BaseDeadline: 10 * time.Second, Out: &mu, Progress: 20 * time.Millisecond}, newMem) {
		t.Fatalf("the check hit its deadline; progress lines: %q", mu.String())
	}
	if !strings.Contains(mu.String(), "Slow") {
		t.Fatalf("progress lines %q: want the check's name", mu.String())
	}
}

// lockedWriter is a strings.Builder safe for a writer and a reader.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

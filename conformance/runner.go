package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// Per-check deadline. Every check, in both runners, runs under a deadline of
//
//	BaseDeadline + k × TTL
//
// measured from the start of the check, where TTL is the effective TTL the
// suite uses on the store (the largest of 400ms, Capabilities().MinTTL
// rounded up to its granularity, and the TTL the store actually granted for
// it, Lease.StoreTTL) and k is the check's budget in TTLs (20 for most
// checks, more for the lost-update experiment). Until the TTL is known
// (while the harness and the first client are made) the deadline assumes
// 400ms. When the deadline passes the check fails with what it was waiting
// for and a trimmed goroutine dump, its context (e.ctx) is cancelled so its
// blocking calls return, and the runner moves on after at most
// deadlineGrace even if the check's goroutine does not return.
const (
	// DefaultBaseDeadline is RunOptions.BaseDeadline's default.
	DefaultBaseDeadline = 20 * time.Second
	defaultTTLBudget    = 20
)

// deadlineGrace is how long after its deadline a check's goroutine may
// take to return before the runner moves on without it.
var deadlineGrace = 5 * time.Second

// errCheckDeadline is the cancel cause of a check's ctx at its deadline.
var errCheckDeadline = errors.New("conformance: the check's deadline passed")

// RunOptions configures RunWith. The zero value (or nil) runs every check
// with the defaults.
type RunOptions struct {
	// Filter runs only the checks whose name contains it. Default: all.
	Filter string
	// Checks, if not empty, runs only the checks with exactly these names
	// (and Filter is also applied).
	Checks []string
	// Out receives a line per check (and the deadline reports).
	// Default: nothing.
	Out io.Writer
	// FailFast stops after the first failing check.
	FailFast bool
	// StopOnDeadline stops after the first check that hit its deadline: a
	// store that stopped answering makes the remaining checks pointless.
	StopOnDeadline bool
	// Continue, if set, is called after each check; returning false stops
	// the run (the CLI re-probes the store after a failure and stops if it
	// no longer answers).
	Continue func(Result) bool
	// Exclude lists checks not to run.
	Exclude []string
	// BaseDeadline is the fixed part of each check's deadline (see the
	// package's "Per-check deadline"). Default: DefaultBaseDeadline.
	BaseDeadline time.Duration
	// TTL is the short TTL the timing checks use, raised to the store's
	// MinTTL. Default: 400ms.
	TTL time.Duration
	// Progress, if positive, writes a line to Out every Progress while a
	// check runs: how long it has run and what it is waiting for, so that
	// a long check (LostUpdates, the freeze checks) is not silent.
	// Default: no such lines.
	Progress time.Duration
}

func (o *RunOptions) ttl() time.Duration {
	if o == nil {
		return 0
	}
	return o.TTL
}

func (o *RunOptions) base() time.Duration {
	if o == nil || o.BaseDeadline <= 0 {
		return DefaultBaseDeadline
	}
	return o.BaseDeadline
}

func (o *RunOptions) selects(name string) bool {
	if o == nil {
		return true
	}
	if o.Filter != "" && !strings.Contains(name, o.Filter) {
		return false
	}
	if slices.Contains(o.Exclude, name) {
		return false
	}
	return len(o.Checks) == 0 || slices.Contains(o.Checks, name)
}

// Result is one check's outcome in Run.
type Result struct {
	Check    string
	Outcome  string // "pass", "fail", "skip", "n/a" (the backend's declarations make the check irrelevant)
	Detail   string // failure or skip messages
	TimedOut bool   // the check hit its deadline
	Elapsed  time.Duration
}

// RunConformanceTests runs every check against the harness newHarness
// makes, one t.Run per check with a fresh harness each, each under its
// deadline (a hung check fails its subtest, naming what it waited for, and
// does not hang go test; see BaseDeadlineEnv). Call it from a backend's test; see URLHarness to
// run it against a deployed store.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	if runFreezeChildIfRequested() {
		return
	}
	o, err := envOptions()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			// The harness is the backend test's code: make it on the test
			// goroutine, with the real t.
			h, err := newHarness(t.Context(), t)
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
			t.Cleanup(h.Close)
			r := &runT{name: t.Name(), test: t, top: topName(t.Name())}
			runCheck(t.Context(), c, r, o, func(context.Context, TB) (Harness, error) { return h, nil })
			r.finish()
			if o := r.outcome(); o == "skip" || o == "n/a" {
				t.Skip(strings.Join(r.msgs, "; "))
			}
		})
	}
}

// BaseDeadlineEnv, if set to a Go duration, is RunConformanceTests's base
// deadline (RunOptions.BaseDeadline): raise it for a slow store, lower it
// to fail hung checks sooner.
const BaseDeadlineEnv = "FENCELOCK_CONFORMANCE_BASE_DEADLINE"

func envOptions() (*RunOptions, error) {
	v := os.Getenv(BaseDeadlineEnv)
	if v == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("%s=%q: want a positive Go duration such as 30s", BaseDeadlineEnv, v)
	}
	return &RunOptions{BaseDeadline: d}, nil
}

func topName(n string) string {
	top, _, _ := strings.Cut(n, "/")
	return top
}

// Run runs the checks whose names contain filter ("" for all) against the
// store newHarness makes, without package testing, writing a line per check
// to out (if not nil). It returns the results; it never panics on a failing
// check. See RunWith for more options.
func Run(ctx context.Context, newHarness func(ctx context.Context) (Harness, error), filter string, out io.Writer) []Result {
	return RunWith(ctx, newHarness, &RunOptions{Filter: filter, Out: out})
}

// RunWith is Run with options. Each check runs under its deadline; a check
// that hits it fails (Result.TimedOut) and the run moves on (or stops, with
// StopOnDeadline). It is safe to call from several goroutines at once.
// The CLI's `conformance` command uses it.
func RunWith(ctx context.Context, newHarness func(ctx context.Context) (Harness, error), o *RunOptions) []Result {
	var out io.Writer = io.Discard
	if o != nil && o.Out != nil {
		out = o.Out
	}
	var res []Result
	for _, c := range checks {
		if !o.selects(c.name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		r := &runT{name: c.name}
		start := time.Now()
		timedOut := runCheck(ctx, c, r, o, func(ctx context.Context, t TB) (Harness, error) {
			return newHarness(ctx)
		})
		rr := Result{Check: c.name, Outcome: r.outcome(), Detail: r.detail(), TimedOut: timedOut, Elapsed: time.Since(start)}
		res = append(res, rr)
		fmt.Fprintf(out, "%-4s %-38s %7.2fs  %s\n", strings.ToUpper(rr.Outcome), rr.Check, rr.Elapsed.Seconds(), rr.Detail)
		if o == nil {
			continue
		}
		if (o.FailFast && rr.Outcome == "fail") || (o.StopOnDeadline && timedOut) || (o.Continue != nil && !o.Continue(rr)) {
			fmt.Fprintf(out, "stopping after %s\n", rr.Check)
			break
		}
	}
	return res
}

// runCheck runs one check on its own goroutine under its deadline and
// reports whether the deadline passed. r collects the outcome.
func runCheck(parent context.Context, c check, r *runT, o *RunOptions, harness func(context.Context, TB) (Harness, error)) (timedOut bool) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	base := o.base()
	budget := c.ttls
	if budget <= 0 {
		budget = defaultTTLBudget
	}
	w := newWatch(time.Now().Add(base + time.Duration(budget)*shortTTL(fencelock.Capabilities{}, o.ttl())))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.runCleanups()
		defer func() {
			if p := recover(); p != nil {
				r.fail(fmt.Sprintf("panic: %v", p))
			}
		}()
		w.set("the harness")
		h, err := harness(ctx, r)
		if err != nil {
			r.Fatalf("harness: %v", err)
		}
		r.Cleanup(h.Close)
		w.set("the first client (Capabilities, granted TTL)")
		e := newEnv(ctx, r, h, o.ttl())
		e.w = w
		w.extend(w.start.Add(base + time.Duration(budget)*e.effTTL()))
		w.set("the check's steps (it set no waiting note since it started)")
		c.run(r, e)
	}()
	var tick <-chan time.Time
	if o != nil && o.Out != nil && o.Progress > 0 {
		tk := time.NewTicker(o.Progress)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		d := w.until()
		tm := time.NewTimer(d)
		select {
		case <-done:
			tm.Stop()
			return false
		case <-w.changed:
			tm.Stop()
			continue
		case <-tick:
			tm.Stop()
			fmt.Fprintf(o.Out, "     %-38s %6.0fs  running: waiting for %s\n", c.name, time.Since(w.start).Seconds(), w.get())
			continue
		case <-tm.C:
			if w.until() > 0 {
				continue
			}
		}
		// Deadline: report while the goroutines are still blocked.
		dump := goroutineDump()
		r.fail(fmt.Sprintf("DEADLINE: the check did not finish within its %v deadline; it was waiting for %s\n%s",
			w.total().Round(time.Millisecond), w.get(), dump))
		cancel(errCheckDeadline)
		g := time.NewTimer(deadlineGrace)
		select {
		case <-done:
		case <-g.C:
			r.fail(fmt.Sprintf("the check's goroutine had not returned %v after its context was cancelled; abandoned", deadlineGrace))
		}
		g.Stop()
		return true
	}
}

// runT implements TB for both runners. In RunConformanceTests it forwards
// messages to the subtest's *testing.T until finish; Fatalf and Skipf end
// the check's own goroutine (never the test's).
type runT struct {
	name string
	test *testing.T // nil in Run
	top  string     // top-level test name, for re-executing the test binary

	mu       sync.Mutex
	finished bool // stop forwarding to test: the subtest is over
	failed   bool
	skipped  bool
	msgs     []string
	cleanups []func()
}

// Helper marks the caller as a helper of the subtest (its messages then
// point at the check's line), while the subtest runs.
func (r *runT) Helper() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.test != nil && !r.finished {
		r.test.Helper()
	}
}
func (r *runT) Name() string { return r.name }

func (r *runT) Logf(f string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.test != nil && !r.finished {
		r.test.Helper()
		r.test.Logf(f, a...)
	}
}

func (r *runT) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.msgs = append(r.msgs, msg)
	if r.test != nil && !r.finished {
		r.test.Helper()
		r.test.Error(msg)
	}
}

func (r *runT) Errorf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)) }

func (r *runT) Fatalf(f string, a ...any) {
	r.fail(fmt.Sprintf(f, a...))
	runtime.Goexit()
}

func (r *runT) Skipf(f string, a ...any) {
	r.mu.Lock()
	r.skipped = true
	r.msgs = append(r.msgs, fmt.Sprintf(f, a...))
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *runT) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *runT) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// finish stops forwarding to the subtest (a check goroutine abandoned at
// its deadline must not log into a finished test).
func (r *runT) finish() {
	r.mu.Lock()
	r.finished = true
	r.mu.Unlock()
}

func (r *runT) runCleanups() {
	for {
		r.mu.Lock()
		n := len(r.cleanups)
		if n == 0 {
			r.mu.Unlock()
			return
		}
		f := r.cleanups[n-1]
		r.cleanups = r.cleanups[:n-1]
		r.mu.Unlock()
		f()
	}
}

func (r *runT) outcome() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.failed:
		return "fail"
	case r.skipped && r.notApplicable():
		return "n/a"
	case r.skipped:
		return "skip"
	}
	return "pass"
}

// notApplicable reports whether the check skipped itself as not
// applicable (every message from notApplicable); r.mu is held.
func (r *runT) notApplicable() bool {
	for _, m := range r.msgs {
		if !strings.HasPrefix(m, naPrefix) {
			return false
		}
	}
	return len(r.msgs) > 0
}

// naPrefix marks the skip message of a check that does not apply.
const naPrefix = "n/a: "

// notApplicable ends the check as not applicable to the backend: its
// declarations make it irrelevant (reported as "n/a", not as a skip).
func notApplicable(t TB, format string, args ...any) {
	t.Helper()
	t.Skipf(naPrefix+format, args...)
}

func (r *runT) detail() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "; ")
}

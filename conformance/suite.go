// Package conformance is the shared behavioural suite every fencelock
// backend passes, and that anyone can run against their own store: from a
// test (RunConformanceTests with a Harness, or URLHarness for a deployed
// store) or from the CLI (`fencelock conformance --url URL`, which uses Run).
//
// Checks drive the portable *fencelock.Client and *fencelock.Lease, so they
// test what users see. Each check gets a fresh Harness and unique lock names
// under a random prefix, and releases what it takes, so the suite is safe to
// run on a shared production cluster. The backend's Capabilities decide the
// TTLs used and which checks apply; optional Harness hooks (Expirer,
// SessionKiller, URL for the process-freeze check) enable more checks.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// TB is the part of testing.TB the checks use; the CLI runner implements it
// without package testing.
type TB interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Cleanup(func())
	Failed() bool
}

type check struct {
	name string
	run  func(t TB, e *env)
}

// checks is the suite, in run order. Topic files append to it in init.
var checks []check

func register(cs ...check) { checks = append(checks, cs...) }

// Checks returns the names of the suite's checks, in run order.
func Checks() []string {
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.name
	}
	return names
}

// env is one check's view of the store.
type env struct {
	ctx    context.Context
	h      Harness
	caps   fencelock.Capabilities
	prefix string
	ttl    time.Duration // short TTL suited to the backend
	margin time.Duration // slack for timing assertions on a loaded machine
	t      TB
}

func newEnv(ctx context.Context, t TB, h Harness) *env {
	e := &env{ctx: ctx, h: h, t: t, prefix: "fencelock-conformance-" + randHex(6) + "/"}
	// Only the capabilities are needed: close this client at once, so that
	// a client still connecting in the background (etcd's dials lazily)
	// cannot start goroutines in the middle of a check's leak snapshot.
	c, err := h.MakeClient(ctx, &fencelock.Options{Prefix: e.prefix})
	if err != nil {
		t.Fatalf("MakeClient: %v", err)
	}
	e.caps = c.Capabilities()
	_ = c.Close()
	e.ttl = shortTTL(e.caps)
	e.margin = max(time.Second, 2*e.ttl)
	return e
}

// shortTTL is the TTL the timing checks use: 400ms, or the backend's
// minimum rounded up to its granularity if larger.
func shortTTL(c fencelock.Capabilities) time.Duration {
	ttl := 400 * time.Millisecond
	if c.MinTTL > ttl {
		ttl = c.MinTTL
	}
	if g := c.TTLGranularity; g > 0 && ttl%g != 0 {
		ttl = (ttl/g + 1) * g
	}
	return ttl
}

// longTTL is a TTL that never runs out during a check.
const longTTL = 30 * time.Second

// client makes a new Client with the run's prefix; closed at cleanup.
func (e *env) client() *fencelock.Client { return e.clientWith(nil) }

func (e *env) clientWith(opts *fencelock.Options) *fencelock.Client {
	e.t.Helper()
	o := fencelock.Options{}
	if opts != nil {
		o = *opts
	}
	o.Prefix = e.prefix + o.Prefix
	c, err := e.h.MakeClient(e.ctx, &o)
	if err != nil {
		e.t.Fatalf("MakeClient: %v", err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// name returns a lock name unique to this check.
func (e *env) name(s string) string {
	n := e.t.Name()
	if i := strings.LastIndex(n, "/"); i >= 0 {
		n = n[i+1:]
	}
	return n + "-" + s
}

// key is the store key of name for clients made by e.
func (e *env) key(name string) string { return e.prefix + name }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RunConformanceTests runs every check against the harness newHarness
// makes, one t.Run per check with a fresh harness each. Call it from a
// backend's test; see URLHarness to run it against a deployed store.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	if runFreezeChildIfRequested() {
		return
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
			t.Cleanup(h.Close)
			c.run(t, newEnv(ctx, t, h))
		})
	}
}

// Result is one check's outcome in Run.
type Result struct {
	Check   string
	Outcome string // "pass", "fail", "skip"
	Detail  string // failure or skip messages
	Elapsed time.Duration
}

// Run runs the checks whose names contain filter ("" for all) against the
// store newHarness makes, without package testing, writing a line per check
// to out (if not nil). It returns the results; it never panics on a failing
// check. The CLI's `conformance` command uses it.
func Run(ctx context.Context, newHarness func(ctx context.Context) (Harness, error), filter string, out io.Writer) []Result {
	if out == nil {
		out = io.Discard
	}
	var res []Result
	for _, c := range checks {
		if filter != "" && !strings.Contains(c.name, filter) {
			continue
		}
		r := &runT{name: c.name}
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer r.runCleanups()
			defer func() {
				if p := recover(); p != nil {
					r.fail(fmt.Sprintf("panic: %v", p))
				}
			}()
			h, err := newHarness(ctx)
			if err != nil {
				r.Fatalf("harness: %v", err)
			}
			r.Cleanup(h.Close)
			c.run(r, newEnv(ctx, r, h))
		}()
		<-done
		rr := Result{Check: c.name, Outcome: r.outcome(), Detail: strings.Join(r.msgs, "; "), Elapsed: time.Since(start)}
		res = append(res, rr)
		fmt.Fprintf(out, "%-4s %-34s %7.2fs  %s\n", strings.ToUpper(rr.Outcome), rr.Check, rr.Elapsed.Seconds(), rr.Detail)
	}
	return res
}

// runT implements TB for Run.
type runT struct {
	name     string
	mu       sync.Mutex
	failed   bool
	skipped  bool
	msgs     []string
	cleanups []func()
}

func (r *runT) Helper()      {}
func (r *runT) Name() string { return r.name }
func (r *runT) Logf(string, ...any) {
}
func (r *runT) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.msgs = append(r.msgs, msg)
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
	case r.skipped:
		return "skip"
	}
	return "pass"
}

// URLHarness returns a HarnessMaker for a deployed store reached by url
// (the backend package must be imported so its scheme is registered).
// Every client opens its own connections.
func URLHarness(url string) HarnessMaker {
	return func(ctx context.Context, _ testing.TB) (Harness, error) { return NewURLHarness(ctx, url) }
}

// NewURLHarness is URLHarness without package testing (for Run).
func NewURLHarness(ctx context.Context, url string) (Harness, error) {
	c, err := fencelock.Open(ctx, url) // fail early on a bad URL
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// mem:// lives in this process: a child process cannot share it.
	return urlHarness{url: url, shared: c.Capabilities().Backend != "mem"}, nil
}

type urlHarness struct {
	url    string
	shared bool // another process can open url and see the same locks
}

func (h urlHarness) MakeClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	return fencelock.DefaultURLMux().Open(ctx, h.url, opts)
}
func (h urlHarness) URL() string {
	if !h.shared {
		return ""
	}
	return h.url
}
func (h urlHarness) Close() {}

// exe is the running binary, re-executed by the process-freeze check.
func exe() (string, error) { return os.Executable() }

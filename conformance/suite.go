// Package conformance is the shared behavioural suite every fencelock
// backend passes, and that anyone can run against their own store: from a
// test (RunConformanceTests with a Harness, or URLHarness for a deployed
// store) or from the CLI (`fencelock conformance --url URL`, which uses
// RunWith).
//
// Checks drive the portable *fencelock.Client and *fencelock.Lease, so they
// test what users see. Each check gets a fresh Harness and unique lock names
// under a random prefix, and releases what it takes, so the suite is safe to
// run on a shared production cluster (what a backend keeps by design, such
// as Redis fence keys, stays). The backend's Capabilities and the TTL the
// store actually grants (Lease.StoreTTL) decide the TTLs and waits used;
// optional Harness hooks (Expirer, SessionKiller, Administered,
// Partitioner, RenewalStaller, URL for the process-freeze check) enable
// more checks. What a backend promises comes from the backend: its
// Capabilities (fence guarantee, FIFO, the timing bounds LossSignal,
// ReleaseWake and ExpiryWake) decide what the checks demand, by URL too.
// The URL harness takes Expirer, SessionKiller and Administered from the
// backend's driver.Admin, and partitions a client from the store through
// fault proxies (package netfault) in front of every store address, so a
// deployed store gets the loss, partition and declared-defect checks too.
//
// A check that a backend's declarations make irrelevant (a quorum check
// on one node, a FIFO check on a backend that does not promise FIFO) is
// reported as not applicable ("n/a"), apart from a skip, which means a
// check that applies could not run (a hook the harness lacks).
//
// The suite never hangs: every check runs under its own deadline (see
// "Per-check deadline" in runner.go) and fails naming what it was waiting
// for, with a goroutine dump. It has teeth: mutants_test.go runs it against
// the mem:// driver with one deliberate defect at a time, and every
// mutant must fail it.
//
// Torture goes beyond the staged scenarios: workers run random lock and
// guarded-register operations while a nemesis applies a fault schedule
// drawn from a seed, every operation is recorded, and CheckHistory judges
// the history (porcupine for the registers' linearizability, plain Go for
// the lease contract). RunTorture and CITorture run it from a test;
// `fencelock torture --url` from the CLI. torture_test.go shows its
// checker catching deliberately broken drivers.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/adminhook"
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
	ttls int // deadline budget in TTLs (see "Per-check deadline"); 0: 20
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
	ctx      context.Context // cancelled at the check's deadline
	h        Harness
	caps     fencelock.Capabilities
	prefix   string
	ttl      time.Duration // short TTL suited to the backend
	storeTTL time.Duration // what the store grants for ttl (Lease.StoreTTL), at least ttl
	margin   time.Duration // slack for timing assertions on a loaded machine
	t        TB
	w        *watch // nil outside the runners (benchmarks)
}

// newEnv makes a check's env; ttl is the short TTL wanted (0: 400ms),
// raised to the store's minimum.
func newEnv(ctx context.Context, t TB, h Harness, ttl time.Duration) *env {
	e := &env{ctx: ctx, h: h, t: t, prefix: "fencelock-conformance-" + randHex(6) + "/"}
	// Only the capabilities and the granted TTL are needed: close this
	// client at once, so that a client still connecting in the background
	// (etcd's dials lazily) cannot start goroutines in the middle of a
	// check's leak snapshot.
	c, err := h.MakeClient(ctx, &fencelock.Options{Prefix: e.prefix})
	if err != nil {
		t.Fatalf("MakeClient: %v", err)
	}
	e.caps = c.Capabilities()
	e.ttl = shortTTL(e.caps, ttl)
	e.storeTTL = grantedTTL(ctx, c, e.ttl)
	_ = c.Close()
	e.margin = max(time.Second, 2*e.effTTL())
	return e
}

// grantedTTL takes a throwaway lease with TTL ttl on c and returns the TTL
// the store granted (Lease.StoreTTL), or ttl if it cannot tell.
func grantedTTL(ctx context.Context, c *fencelock.Client, ttl time.Duration) time.Duration {
	l, err := c.TryAcquire(ctx, "ttl-probe-"+randHex(4), opts(ttl, false))
	if err != nil {
		return ttl
	}
	defer l.Release(ctx)
	return leaseStoreTTL(l, ttl)
}

// leaseStoreTTL is l.StoreTTL(), at least ttl.
func leaseStoreTTL(l *fencelock.Lease, ttl time.Duration) time.Duration {
	return max(l.StoreTTL(), ttl)
}

// effTTL is the effective TTL: how long the store may keep a lease taken
// with e.ttl. Waits for the store to drop a lock are sized from it.
func (e *env) effTTL() time.Duration { return max(e.ttl, e.storeTTL) }

// waiting records what the check waits for next; a deadline report names it.
func (e *env) waiting(what string) {
	if e.w != nil {
		e.w.set(what)
	}
}

// sleep waits d, or until the check's ctx ends (then it reports false).
func (e *env) sleep(d time.Duration) bool {
	if d <= 0 {
		return e.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.ctx.Done():
		return false
	}
}

// shortTTL is the TTL the timing checks use: want (0: 400ms), or the
// backend's minimum if larger, rounded up to the backend's granularity.
func shortTTL(c fencelock.Capabilities, want time.Duration) time.Duration {
	ttl := want
	if ttl <= 0 {
		ttl = 400 * time.Millisecond
	}
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

// URLHarness returns a HarnessMaker for a deployed store reached by url
// (the backend package must be imported so its scheme is registered).
// Every client opens its own connections. When the backend implements
// driver.Admin (reached with Client.As), the harness is also an Expirer and
// a SessionKiller, through the store's own admin operations.
func URLHarness(url string) HarnessMaker {
	return func(ctx context.Context, _ testing.TB) (Harness, error) { return NewURLHarness(ctx, url) }
}

// NewURLHarness is URLHarness without package testing (for Run). It opens
// one client on url, kept for the admin hooks and closed by Close.
func NewURLHarness(ctx context.Context, url string) (Harness, error) {
	c, err := fencelock.Open(ctx, url) // fail early on a bad URL
	if err != nil {
		return nil, err
	}
	// mem:// lives in this process: a child process cannot share it.
	h := urlHarness{url: url, shared: c.Capabilities().Backend != "mem"}
	adm, ok := adminhook.Of(c)
	if !ok {
		_ = c.Close()
		return h, nil
	}
	return &adminHarness{urlHarness: h, admin: c, adm: adm}, nil
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

var _ Partitioner = urlHarness{}

// PartitionedClient opens a client on the URL rewritten through fault
// proxies (ProxyURL).
func (h urlHarness) PartitionedClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, *Faults, error) {
	u, f, err := ProxyURL(h.url)
	if err != nil {
		return nil, nil, err
	}
	c, err := fencelock.DefaultURLMux().Open(ctx, u, opts)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return c, f, nil
}

// adminHarness is a urlHarness whose backend has driver.Admin.
type adminHarness struct {
	urlHarness
	admin *fencelock.Client // the client adm belongs to
	adm   driver.Admin
}

var (
	_ Expirer       = (*adminHarness)(nil)
	_ SessionKiller = (*adminHarness)(nil)
)

var _ Administered = (*adminHarness)(nil)

func (h *adminHarness) Admin() driver.Admin { return h.adm }

func (h *adminHarness) Expire(ctx context.Context, key string) error { return h.adm.Expire(ctx, key) }

func (h *adminHarness) KillSession(ctx context.Context, c *fencelock.Client) error {
	adm, ok := adminhook.Of(c)
	if !ok {
		return fmt.Errorf("%w: the client has no driver.Admin", fencelock.ErrInvalid)
	}
	return adm.KillSessions(ctx)
}

func (h *adminHarness) Close() { _ = h.admin.Close() }

// exe is the running binary, re-executed by the process-freeze check.
func exe() (string, error) { return os.Executable() }

//go:build linux

package conformance_test

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
)

// The frozen client process's teeth: a torture on a served mem Store
// whose only fault is freeze-client (SIGSTOP of the child process that
// runs one worker's Client, often past the TTL), with the defect in the
// child's driver alone (the parent's Clients are sound), must be caught;
// the same run with a sound child must pass.

// childMutants: each defect is in the child's driver only. A driver
// whose Extend reports success after the store dropped the lease is not
// among them: the freeze alone does not show it, since a frozen holder
// outlives its local deadline before the store's, and once past it the
// Lease ends without asking the driver (measured: caught in 2 of 6
// 12-second runs, and through a race of the resumed process's timers).
// The in-process ExtendSucceedsAfterLoss torture mutant, whose lie an
// admin expire shows, covers it.
var childMutants = []struct {
	name, defect string
	checks       []string
}{
	// The store keeps the child's locks for 60% of the TTL asked: a
	// child frozen while holding still believes (until its ValidUntil)
	// after another worker was granted the name.
	{"StoreExpiresEarly", "the store keeps the child's locks for 60% of the TTL asked", []string{"overlap"}},
}

// childTortureDuration: the CI torture's length.
const childTortureDuration = 12 * time.Second

func TestTortureFrozenClientMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the torture runs several times")
	}
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the parallel subtests
	t.Run("unmutated", func(t *testing.T) {
		t.Parallel()
		res := tortureFrozenChild(t, "", 24)
		var b strings.Builder
		res.WriteReport(&b, "")
		if len(res.Violations) > 0 {
			t.Errorf("the sound child broke the contract:\n%s", b.String())
		}
		frozen := 0
		for _, f := range res.History.Faults() {
			if f.Kind == "freeze-client" && !strings.Contains(f.Target, "failed") {
				frozen++
			}
		}
		childOps := 0
		for _, o := range res.History.Ops() {
			if o.Client == res.Meta.Child {
				childOps++
			}
		}
		if frozen == 0 || childOps < 20 {
			t.Errorf("%d freeze-client faults, %d operations by the child's worker: the child barely ran", frozen, childOps)
		}
		t.Logf("%d freezes, %d child operations:\n%s", frozen, childOps, b.String())
	})
	for _, m := range childMutants {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			res := tortureFrozenChild(t, m.name, 24)
			var b strings.Builder
			res.WriteReport(&b, "")
			first, check := time.Duration(-1), ""
			inFreeze := 0
			for _, v := range res.Violations {
				for _, f := range res.History.Faults() {
					if f.Kind == "freeze-client" && f.Start <= v.To && f.End >= v.From {
						inFreeze++
						break
					}
				}
				if slices.Contains(m.checks, v.Check) && (first < 0 || v.To < first) {
					first, check = v.To, v.Check
				}
			}
			if first < 0 {
				t.Fatalf("child mutant %s (%s) was not caught by the %v checks:\n%s", m.name, m.defect, m.checks, b.String())
			}
			t.Logf("child mutant %s caught by the %s check at %v of the run (%d ops, %d faults; %d of %d violations overlap a freeze):\n%s",
				m.name, check, first.Round(time.Millisecond), res.Ops(), res.FaultCount(), inFreeze, len(res.Violations), b.String())
		})
	}
}

func tortureFrozenChild(t *testing.T, mutant string, seed uint64) *conformance.TortureResult {
	t.Helper()
	h, err := newServedHarness(mutant)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	res, err := conformance.Torture(t.Context(), h, conformance.TortureOptions{
		Duration: childTortureDuration, Seed: seed, ChildArgs: []string{"-test.run=^$"},
	})
	if err != nil {
		t.Fatalf("torture: %v", err)
	}
	if dir := os.Getenv("FENCELOCK_TORTURE_DIR"); dir != "" {
		base := filepath.Join(dir, fmt.Sprintf("frozen-%s-%d", cmp.Or(mutant, "unmutated"), seed))
		if err := res.WriteFiles(base+".jsonl", base+".svg"); err != nil {
			t.Error(err)
		}
	}
	if res.Meta.Child < 0 {
		t.Fatalf("no worker ran in a child process")
	}
	return res
}

// servedHarness serves one mem Store in-process and over TCP; its
// in-process Clients are sound, and the child's URL carries the mutant.
// It injects no fault of its own: the nemesis can only freeze the child.
type servedHarness struct {
	s      *memory.Store
	ln     net.Listener
	done   chan struct{}
	mutant string
}

func newServedHarness(mutant string) (*servedHarness, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &servedHarness{s: memory.NewStore(), ln: ln, done: make(chan struct{}), mutant: mutant}
	go func() { defer close(h.done); _ = memory.Serve(ln, h.s) }()
	return h, nil
}

func (h *servedHarness) MakeClient(_ context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	return memory.New(h.s, nil, opts)
}

func (h *servedHarness) URL() string {
	if h.mutant == "" {
		return "memrpc://" + h.ln.Addr().String()
	}
	return childMutScheme + "://" + h.ln.Addr().String() + "?mutant=" + h.mutant
}

func (h *servedHarness) Close() {
	h.ln.Close()
	<-h.done
}

// IgnoreGoroutines: the served Store's connection goroutines are the
// store's.
func (h *servedHarness) IgnoreGoroutines() []goleak.Option {
	return []goleak.Option{goleak.IgnoreAnyFunction("net/rpc.(*Server).ServeCodec")}
}

// childMutScheme opens a memrpc Store through a driver with a defect:
// childmut://HOST:PORT?mutant=NAME.
const childMutScheme = "childmut"

func init() {
	fencelock.Register(childMutScheme, fencelock.URLOpenerFunc(openChildMut))
}

func openChildMut(ctx context.Context, u *url.URL) (driver.Backend, error) {
	c, err := fencelock.DefaultURLMux().Open(ctx, "memrpc://"+u.Host, nil)
	if err != nil {
		return nil, err
	}
	return &lyingDriver{c: c, mutant: u.Query().Get("mutant")}, nil
}

// lyingDriver is a driver made of a sound Client (each lease one of its
// Leases, renewed by nobody but this driver's caller), which lies as its
// mutant says.
type lyingDriver struct {
	c      *fencelock.Client
	mutant string
}

func (d *lyingDriver) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, err := d.c.TryAcquire(ctx, req.Name, &fencelock.AcquireOptions{TTL: d.storeTTL(req.TTL), AutoRenew: fencelock.Bool(false)})
	if err != nil {
		return nil, err
	}
	return &lyingLease{l: l, d: d}, nil
}

// storeTTL is how long the store keeps a lock asked for ttl.
func (d *lyingDriver) storeTTL(ttl time.Duration) time.Duration {
	if d.mutant == "StoreExpiresEarly" {
		return ttl * 6 / 10
	}
	return ttl
}

func (d *lyingDriver) Capabilities() driver.Capabilities {
	c := memory.NewDriver(memory.NewStore()).Capabilities()
	c.Backend, c.Wait, c.LossSignal, c.ReleaseWake, c.ExpiryWake = "childmut", driver.WaitPoll, 0, 0, 0
	c.Inspect = driver.InspectCaps{}
	return c
}

func (d *lyingDriver) Close() error { return d.c.Close() }

type lyingLease struct {
	l *fencelock.Lease
	d *lyingDriver
}

func (l *lyingLease) Fence() driver.Fence { return l.l.Fence() }

func (l *lyingLease) Extend(ctx context.Context, ttl time.Duration) error {
	return l.l.Extend(ctx, l.d.storeTTL(ttl))
}

func (l *lyingLease) Release(ctx context.Context) error { return l.l.Release(ctx) }

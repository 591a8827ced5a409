package conformance_test

import (
	"cmp"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
)

// The torture checker's teeth: the mem:// driver with one deliberate
// defect at a time (a wrapper around the real driver, as in
// mutants_test.go) must be caught by the torture run's checker within a
// CI-sized run, and the unmutated driver must pass the same run.

// tortureMutants, each a defect the issue names, and how long its run
// lasts (0: tortureDuration).
var tortureMutants = []struct {
	name, defect, check string
	runFor              time.Duration
}{
	{"DoubleGrant", "1 in 500 refused TryAcquire attempts is granted anyway", "overlap", 0},
	{"FenceRepeatsAfterRestart", "fences live in memory: a store restart starts every name's fences over", "fence", 0},
	// The lie shows only when an admin expire drops a holder, another
	// worker is granted the name, and the dropped holder then extends
	// before its local deadline: caught at 0.35-3.5 s on a quiet machine
	// (8 of 8 runs), and once not within 15 s beside a full CI run.
	{"ExtendSucceedsAfterLoss", "Extend reports success for a lease the store dropped (and no loss notification)", "after-grant", 2 * tortureDuration},
	{"NeverWakes", "a blocked Acquire's waiter is never woken: it waits until its ctx ends", "liveness", 0},
}

// tortureDuration is each mutant run's random phase.
const tortureDuration = 15 * time.Second

func TestTortureMemMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the torture mutants run the torture several times")
	}
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the parallel subtests
	t.Run("unmutated", func(t *testing.T) {
		t.Parallel()
		res := tortureMem(t, "", 24)
		if len(res.Violations) > 0 {
			var b strings.Builder
			res.WriteReport(&b, "")
			t.Errorf("the unmutated mem driver broke the contract:\n%s", b.String())
		}
		if res.Ops() < 200 {
			t.Errorf("only %d operations in %v: the workers barely ran", res.Ops(), tortureDuration)
		}
	})
	for _, m := range tortureMutants {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			res := tortureMemFor(t, m.name, 24, cmp.Or(m.runFor, tortureDuration))
			var b strings.Builder
			res.WriteReport(&b, "")
			first := time.Duration(-1)
			for _, v := range res.Violations {
				if v.Check == m.check && (first < 0 || v.To < first) {
					first = v.To
				}
			}
			if first < 0 {
				t.Fatalf("mutant %s (%s) was not caught by the %s check:\n%s", m.name, m.defect, m.check, b.String())
			}
			t.Logf("mutant %s caught by the %s check at %v of the run (%d ops, %d faults):\n%s", m.name, m.check, first.Round(time.Millisecond), res.Ops(), res.FaultCount(), b.String())
		})
	}
}

// TestTortureSeedReproduces: the same seed draws the same fault schedule,
// another seed another; and a violation a seed found, that seed finds
// again.
func TestTortureSeedReproduces(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	defer goleak.VerifyNone(t)
	var a, b, c *conformance.TortureResult
	var wg sync.WaitGroup
	wg.Go(func() { a = tortureMem(t, "FenceRepeatsAfterRestart", 7) })
	wg.Go(func() { b = tortureMem(t, "FenceRepeatsAfterRestart", 7) })
	wg.Go(func() { c = tortureMem(t, "FenceRepeatsAfterRestart", 8) })
	wg.Wait()
	if t.Failed() {
		return
	}
	if !slices.Equal(a.Schedule, b.Schedule) || len(a.Schedule) == 0 {
		t.Errorf("seed 7 drew two schedules:\n%v\n%v", a.Schedule, b.Schedule)
	}
	if slices.Equal(a.Schedule, c.Schedule) {
		t.Errorf("seeds 7 and 8 drew the same schedule: %v", a.Schedule)
	}
	for _, r := range []*conformance.TortureResult{a, b} {
		if !slices.ContainsFunc(r.Violations, func(v conformance.Violation) bool { return v.Check == "fence" }) {
			t.Errorf("seed 7 did not find the repeated fence in one of two runs (%d violations)", len(r.Violations))
		}
	}
	t.Logf("seed 7's schedule (twice): %v", a.Schedule)
}

// TestTortureHistoryRoundTrip: a history written to JSONL and read back
// checks the same.
func TestTortureHistoryRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	res := tortureMemFor(t, "DoubleGrant", 3, 5*time.Second)
	var b strings.Builder
	if err := res.History.WriteJSONL(&b); err != nil {
		t.Fatal(err)
	}
	h, err := conformance.ReadHistory(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(h.Ops()), res.Ops(); got != want {
		t.Errorf("read back %d ops, wrote %d", got, want)
	}
	if h.Meta != res.Meta {
		t.Errorf("meta read back as %+v, wrote %+v", h.Meta, res.Meta)
	}
	if got, want := fmt.Sprint(conformance.CheckHistory(h)), fmt.Sprint(res.Violations); got != want {
		t.Errorf("the history read back checks differently:\n%s\nwant\n%s", got, want)
	}
	var svg strings.Builder
	if err := h.WriteSVG(&svg, 0, 0, res.Violations); err != nil || !strings.Contains(svg.String(), "<rect") {
		t.Errorf("timeline: %v, %d bytes without a holder bar", err, svg.Len())
	}
	for d := xml.NewDecoder(strings.NewReader(svg.String())); ; {
		if _, err := d.Token(); err != nil {
			if err != io.EOF {
				t.Errorf("the timeline is not well-formed XML: %v", err)
			}
			break
		}
	}
}

func tortureMem(t *testing.T, mutant string, seed uint64) *conformance.TortureResult {
	return tortureMemFor(t, mutant, seed, tortureDuration)
}

func tortureMemFor(t *testing.T, mutant string, seed uint64, d time.Duration) *conformance.TortureResult {
	t.Helper()
	h := newTortureHarness(mutant, seed)
	res, err := conformance.Torture(t.Context(), h, conformance.TortureOptions{Duration: d, Seed: seed})
	if err != nil {
		t.Fatalf("torture: %v", err)
	}
	return res
}

// tortureHarness serves one mem Store; every client's driver carries the
// mutant's defect. It can expire a name and restart the store (which
// drops every lock and, for FenceRepeatsAfterRestart, every fence).
type tortureHarness struct {
	s      *memory.Store
	mutant string

	mu   sync.Mutex
	rng  *rand.Rand              // seeded: a seed replays the mutant's choices too
	last map[string]driver.Fence // each key's last fence from the store
	base map[string]driver.Fence // FenceRepeatsAfterRestart: subtracted from each key's fences
}

func newTortureHarness(mutant string, seed uint64) *tortureHarness {
	return &tortureHarness{s: memory.NewStore(), mutant: mutant, rng: rand.New(rand.NewPCG(seed, 99)), last: map[string]driver.Fence{}, base: map[string]driver.Fence{}}
}

var (
	_ conformance.Expirer        = (*tortureHarness)(nil)
	_ conformance.StoreRestarter = (*tortureHarness)(nil)
)

func (h *tortureHarness) MakeClient(_ context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	var b driver.Backend = &tortureBackend{Backend: memory.NewDriver(h.s), h: h}
	if h.mutant == "NeverWakes" {
		b = &deafBlocker{b.(*tortureBackend)}
	}
	return fencelock.New(b, opts), nil
}

func (h *tortureHarness) URL() string { return "" }
func (h *tortureHarness) Close()      {}

func (h *tortureHarness) Expire(_ context.Context, key string) error {
	h.s.Expire(key)
	return nil
}

// RestartStore drops every lock; the mutant also forgets the fences.
func (h *tortureHarness) RestartStore(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, f := range h.last {
		h.s.Expire(key)
		if h.mutant == "FenceRepeatsAfterRestart" {
			h.base[key] = f
		}
	}
	return nil
}

type tortureBackend struct {
	driver.Backend
	h *tortureHarness
}

func (b *tortureBackend) Wait(ctx context.Context, name string) error {
	return b.Backend.(driver.Waiter).Wait(ctx, name)
}

func (b *tortureBackend) As(target any) bool { return b.Backend.(driver.Aser).As(target) }

func (b *tortureBackend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	h := b.h
	dl, err := b.Backend.TryAcquire(ctx, req)
	if errors.Is(err, driver.ErrNotAcquired) && h.mutant == "DoubleGrant" {
		h.mu.Lock()
		hit := h.rng.IntN(500) == 0
		h.mu.Unlock()
		if _, f, held := h.s.Holder(req.Name); hit && held {
			return &ghostLease{fence: f + 1}, nil
		}
	}
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.last[req.Name] = dl.Fence()
	base := h.base[req.Name]
	h.mu.Unlock()
	l := &tortureLease{Lease: dl, b: b, fence: dl.Fence() - base}
	if h.mutant == "ExtendSucceedsAfterLoss" {
		return l, nil // no loss notification
	}
	return &notifying{l}, nil
}

type tortureLease struct {
	driver.Lease
	b     *tortureBackend
	fence driver.Fence
}

func (l *tortureLease) Fence() driver.Fence { return l.fence }

func (l *tortureLease) Extend(ctx context.Context, ttl time.Duration) error {
	err := l.Lease.Extend(ctx, ttl)
	if errors.Is(err, driver.ErrLeaseLost) && l.b.h.mutant == "ExtendSucceedsAfterLoss" {
		return nil
	}
	return err
}

type notifying struct{ *tortureLease }

func (l *notifying) OnLost(f func()) (stop func() bool) {
	return l.Lease.(driver.LossNotifier).OnLost(f)
}

// ghostLease is a second grant of a held lock: it holds nothing.
type ghostLease struct{ fence driver.Fence }

func (g *ghostLease) Fence() driver.Fence                         { return g.fence }
func (g *ghostLease) Extend(context.Context, time.Duration) error { return nil }
func (g *ghostLease) Release(context.Context) error               { return nil }

// deafBlocker queues its waiters itself (a driver.Blocker) but never
// wakes them: a blocked Acquire tries once, then waits for its ctx.
type deafBlocker struct{ *tortureBackend }

func (b *deafBlocker) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	sent := time.Now()
	l, err := b.TryAcquire(ctx, req)
	if !errors.Is(err, driver.ErrNotAcquired) {
		return l, sent, err
	}
	<-ctx.Done()
	return nil, sent, ctx.Err()
}

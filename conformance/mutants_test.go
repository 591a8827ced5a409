package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
)

// The mutation self-test: the mem:// reference driver with one deliberate
// defect at a time must fail the suite (quickly, never hang), and the
// unmutated driver must pass it with the same runner and harness.

// mutants, each a defect a real driver could have.
var mutants = []struct{ name, defect string }{
	{"FenceRepeats", "every third grant of a name repeats the previous fence"},
	{"FenceGoesDown", "every third grant of a name gets a fence lower than the previous"},
	{"SecondGrantWhileHeld", "about 1 in 30 refused TryAcquire attempts is granted anyway"},
	{"ExtendSucceedsAfterLoss", "Extend reports success for a lease the store no longer holds under its token (no loss notification)"},
	{"ReleaseSucceedsAfterLoss", "Release reports success for a lease the store no longer holds under its token (no loss notification)"},
	{"ReleaseFreesNothing", "Release reports success and frees nothing (the lock stays until its TTL)"},
	{"LossNeverSignalled", "the LossNotifier channel never closes: a store-side drop is never signalled"},
	{"AmbiguousGrantLeftBehind", "a TryAcquire whose ctx ends while the (3ms) reply is on the way returns the ctx error and leaves the lock held"},
	{"ReleaseFreesOtherHolder", "Release of a lost lease deletes whoever holds the lock now (DEL without an owner check)"},
	{"ExtendRetakesLock", "Extend of a dropped lease takes the lock again if it is free (SET without an owner check)"},
	{"EarlyStoreExpiry", "the store keeps locks for 60% of the TTL asked"},
	{"DeafWaiter", "Wait ignores release notices and returns only when its ctx ends (the backoff interval): waiters are woken by polling alone"},
	{"BargingFIFO", "declares FIFO, but a TryAcquire right after a release takes the lock ahead of a queued waiter (the mem store wakes waiters and lets anyone race them)"},
	{"EarlyGrantSlowReply", "the store keeps locks for 60% of the TTL asked, and the reply to a grant made before the previous holder's TTL ran out arrives just after it"},
	{"InspectDropsLabel", "Inspect reports a held lock without its holder's label"},
	{"InspectFenceOffByOne", "Inspect reports the holder's fence minus one"},
	{"InspectLags", "Inspect answers from a cache refreshed once a second (a lagging replica)"},
	{"RelabelIgnored", "SetLabel reports success and leaves the stored label unchanged"},
}

// mutHarness serves one mem Store per check; every client's driver is
// wrapped with the mutant's defect ("" for none).
type mutHarness struct {
	s      *memory.Store
	mutant string

	mu      sync.Mutex
	drivers map[*fencelock.Client]*mutBackend
	due     map[string][2]time.Time // EarlyGrantSlowReply: when each name's holder's lease ends in the store, and as asked
}

func newMutHarness(mutant string) func(context.Context) (conformance.Harness, error) {
	return func(context.Context) (conformance.Harness, error) {
		return &mutHarness{s: memory.NewStore(), mutant: mutant, drivers: map[*fencelock.Client]*mutBackend{}, due: map[string][2]time.Time{}}, nil
	}
}

var (
	_ conformance.Expirer        = (*mutHarness)(nil)
	_ conformance.SessionKiller  = (*mutHarness)(nil)
	_ conformance.RenewalStaller = (*mutHarness)(nil)
)

func (h *mutHarness) MakeClient(_ context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	b := &mutBackend{Backend: memory.NewDriver(h.s), s: h.s, h: h, mutant: h.mutant, cache: map[string]inspected{}}
	c := fencelock.New(b, opts)
	h.mu.Lock()
	h.drivers[c] = b
	h.mu.Unlock()
	return c, nil
}

// URL: none; the process-freeze check needs another process.
func (h *mutHarness) URL() string { return "" }
func (h *mutHarness) Close()      {}

func (h *mutHarness) Expire(_ context.Context, key string) error {
	h.s.Expire(key)
	return nil
}

func (h *mutHarness) KillSession(_ context.Context, c *fencelock.Client) error {
	var sess memory.Session
	if !c.As(&sess) {
		return errors.New("not a mem:// client")
	}
	h.s.KillSession(sess)
	return nil
}

func (h *mutHarness) StallExtends(c *fencelock.Client, d time.Duration) func() {
	h.mu.Lock()
	b := h.drivers[c]
	h.mu.Unlock()
	b.stall.Store(int64(d))
	return func() { b.stall.Store(0) }
}

// mutBackend is the mem driver with one defect.
type mutBackend struct {
	driver.Backend
	s      *memory.Store
	h      *mutHarness
	mutant string
	stall  atomic.Int64 // extra Extend latency (RenewalStaller)

	cacheMu sync.Mutex
	cache   map[string]inspected // InspectLags
}

type inspected struct {
	at   time.Time
	info driver.LockInfo
}

func (b *mutBackend) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	in := b.Backend.(driver.Inspector)
	if b.mutant == "InspectLags" {
		b.cacheMu.Lock()
		defer b.cacheMu.Unlock()
		if c, ok := b.cache[name]; ok && time.Since(c.at) < time.Second {
			return c.info, nil
		}
	}
	info, err := in.Inspect(ctx, name)
	if err != nil || !info.Held {
		if b.mutant == "InspectLags" && err == nil {
			b.cache[name] = inspected{time.Now(), info}
		}
		return info, err
	}
	switch b.mutant {
	case "InspectDropsLabel":
		info.Label = ""
	case "InspectFenceOffByOne":
		info.Fence--
	case "InspectLags":
		b.cache[name] = inspected{time.Now(), info}
	}
	return info, nil
}

func (b *mutBackend) Wait(ctx context.Context, name string) error {
	if b.mutant == "DeafWaiter" {
		<-ctx.Done()
		return ctx.Err()
	}
	return b.Backend.(driver.Waiter).Wait(ctx, name)
}

func (b *mutBackend) Capabilities() driver.Capabilities {
	c := b.Backend.Capabilities()
	if b.mutant == "BargingFIFO" {
		c.FIFO = true
	}
	return c
}

func (b *mutBackend) As(target any) bool { return b.Backend.(driver.Aser).As(target) }

func (b *mutBackend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	switch b.mutant {
	case "EarlyStoreExpiry":
		req.TTL = req.TTL * 6 / 10
	case "EarlyGrantSlowReply":
		asked := req.TTL
		req.TTL = req.TTL * 6 / 10
		dl, err := b.Backend.TryAcquire(ctx, req)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		b.h.mu.Lock()
		prev := b.h.due[req.Name]
		b.h.due[req.Name] = [2]time.Time{now.Add(req.TTL), now.Add(asked)}
		b.h.mu.Unlock()
		if !now.Before(prev[0]) && now.Before(prev[1]) {
			// Granted because the previous lease expired early, before
			// its TTL ran out: a reply slow enough to land just after
			// that TTL hides it.
			time.Sleep(time.Until(prev[1]) + 10*time.Millisecond)
		}
		return b.wrap(dl, req), nil
	case "AmbiguousGrantLeftBehind":
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dl, err := b.Backend.TryAcquire(context.WithoutCancel(ctx), req)
		if err != nil {
			return nil, err
		}
		t := time.NewTimer(3 * time.Millisecond) // the reply is on its way
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err() // the defect: the grant stays in the store
		}
		return b.wrap(dl, req), nil
	}
	dl, err := b.Backend.TryAcquire(ctx, req)
	if b.mutant == "SecondGrantWhileHeld" && errors.Is(err, driver.ErrNotAcquired) && rand.N(30) == 0 {
		if _, f, held := b.s.Holder(req.Name); held {
			return &fakeLease{fence: f + 1}, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return b.wrap(dl, req), nil
}

func (b *mutBackend) wrap(dl driver.Lease, req driver.AcquireRequest) driver.Lease {
	l := &mutLease{b: b, inner: dl, name: req.Name, token: req.Token}
	switch b.mutant {
	case "ExtendSucceedsAfterLoss", "ReleaseSucceedsAfterLoss", "ExtendRetakesLock", "ReleaseFreesOtherHolder":
		return l // a driver without loss notification
	}
	return &notifyingLease{l}
}

type mutLease struct {
	b           *mutBackend
	inner       driver.Lease
	name, token string
}

func (l *mutLease) Fence() driver.Fence {
	f := l.inner.Fence()
	switch {
	case l.b.mutant == "FenceRepeats" && f%3 == 0:
		return f - 1
	case l.b.mutant == "FenceGoesDown" && f%3 == 0:
		return f - 2
	}
	return f
}

func (l *mutLease) Extend(ctx context.Context, ttl time.Duration) error {
	if d := time.Duration(l.b.stall.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	asked := ttl
	if l.b.mutant == "EarlyStoreExpiry" || l.b.mutant == "EarlyGrantSlowReply" {
		ttl = ttl * 6 / 10
	}
	err := l.inner.Extend(ctx, ttl)
	if err == nil && l.b.mutant == "EarlyGrantSlowReply" {
		now := time.Now()
		l.b.h.mu.Lock()
		l.b.h.due[l.name] = [2]time.Time{now.Add(ttl), now.Add(asked)}
		l.b.h.mu.Unlock()
	}
	if errors.Is(err, driver.ErrLeaseLost) {
		switch l.b.mutant {
		case "ExtendSucceedsAfterLoss":
			return nil
		case "ExtendRetakesLock":
			if _, err2 := memory.NewDriver(l.b.s).TryAcquire(ctx, driver.AcquireRequest{Name: l.name, Token: l.token, TTL: ttl}); err2 == nil {
				return nil
			}
		}
	}
	return err
}

func (l *mutLease) Release(ctx context.Context) error {
	if l.b.mutant == "ReleaseFreesNothing" {
		return nil
	}
	err := l.inner.Release(ctx)
	if err == nil && l.b.mutant == "EarlyGrantSlowReply" {
		l.b.h.mu.Lock()
		delete(l.b.h.due, l.name)
		l.b.h.mu.Unlock()
	}
	if errors.Is(err, driver.ErrLeaseLost) {
		switch l.b.mutant {
		case "ReleaseSucceedsAfterLoss":
			return nil
		case "ReleaseFreesOtherHolder":
			l.b.s.Expire(l.name) // whoever holds it now
			return nil
		}
	}
	return err
}

func (l *mutLease) SetLabel(ctx context.Context, label string) error {
	if l.b.mutant == "RelabelIgnored" {
		return nil
	}
	return l.inner.(driver.Relabeler).SetLabel(ctx, label)
}

type notifyingLease struct{ *mutLease }

func (l *notifyingLease) OnLost(f func()) (stop func() bool) {
	if l.b.mutant == "LossNeverSignalled" {
		return func() bool { return true }
	}
	return l.inner.(driver.LossNotifier).OnLost(f)
}

// fakeLease is a second grant of a held lock: it holds nothing.
type fakeLease struct{ fence driver.Fence }

func (f *fakeLease) Fence() driver.Fence                         { return f.fence }
func (f *fakeLease) Extend(context.Context, time.Duration) error { return nil }
func (f *fakeLease) Release(context.Context) error               { return nil }

// mutantOptions: a short base deadline, so that a check a mutant hangs
// costs seconds, and a 200ms TTL to halve every wait.
var mutantOptions = conformance.RunOptions{BaseDeadline: 3 * time.Second, TTL: 200 * time.Millisecond}

func TestMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the mutation self-test runs the suite many times")
	}
	start := time.Now()
	ctx := t.Context()

	// The reference driver unmutated, with the same runner and harness.
	for _, r := range conformance.RunWith(ctx, newMutHarness(""), &mutantOptions) {
		switch {
		case r.Outcome == "fail":
			t.Errorf("unmutated mem driver failed %s: %s", r.Check, r.Detail)
		case r.Outcome == "skip" && !inProcessSkip(r.Check):
			t.Errorf("unmutated mem driver skipped %s: %s", r.Check, r.Detail)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	baseline := time.Since(start)

	// Each mutant, a few at a time: each must fail at least one check.
	type outcome struct {
		caught, deadline []string
		details          []string // check: first line of its failure
		took             time.Duration
	}
	out := make([]outcome, len(mutants))
	record := func(i int, res []conformance.Result) {
		for _, r := range res {
			if r.Outcome == "fail" {
				d, _, _ := strings.Cut(r.Detail, "\n")
				if len(d) > 300 {
					d = d[:300] + "..."
				}
				out[i].details = append(out[i].details, r.Check+": "+d)
			}
			switch {
			case r.Outcome != "fail":
			case r.TimedOut:
				out[i].deadline = append(out[i].deadline, r.Check)
			default:
				out[i].caught = append(out[i].caught, r.Check)
			}
		}
	}
	// The leak check looks at every goroutine in the process, and the
	// high-volume check keeps the CPUs busy: run them alone.
	par := mutantOptions
	par.Exclude = []string{"NoGoroutineLeaks", "HighVolumeExclusion"}
	alone := conformance.RunOptions{BaseDeadline: par.BaseDeadline, TTL: par.TTL, Checks: par.Exclude}
	for i, m := range mutants {
		t0 := time.Now()
		record(i, conformance.RunWith(ctx, newMutHarness(m.name), &alone))
		out[i].took = time.Since(t0)
	}
	// The rest, a few mutants at a time, the slowest first.
	queue := make(chan int, len(mutants))
	for _, i := range slowestFirst() {
		queue <- i
	}
	close(queue)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range parallelMutants() {
		wg.Go(func() {
			for i := range queue {
				t0 := time.Now()
				res := conformance.RunWith(ctx, newMutHarness(mutants[i].name), &par)
				mu.Lock()
				record(i, res)
				out[i].took += time.Since(t0)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	order := conformance.Checks()
	for i := range out {
		slices.SortFunc(out[i].caught, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
		slices.SortFunc(out[i].deadline, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
	}
	var table strings.Builder
	fmt.Fprintf(&table, "unmutated mem driver: all checks pass (%v)\n", baseline.Round(time.Millisecond))
	for i, m := range mutants {
		o := out[i]
		fmt.Fprintf(&table, "%-25s %6.1fs caught by: %s", m.name, o.took.Seconds(), strings.Join(o.caught, ", "))
		if len(o.deadline) > 0 {
			fmt.Fprintf(&table, "; at its deadline: %s", strings.Join(o.deadline, ", "))
		}
		fmt.Fprintf(&table, "\n%25s         (%s)\n", "", m.defect)
		if len(o.caught)+len(o.deadline) == 0 {
			t.Errorf("mutant %s (%s) passed the whole suite", m.name, m.defect)
		}
	}
	t.Logf("mutation self-test in %v:\n%s", time.Since(start).Round(time.Millisecond), table.String())
	if p := os.Getenv("FENCELOCK_MUTANTS_REPORT"); p != "" {
		for i, m := range mutants {
			fmt.Fprintf(&table, "\n%s:\n", m.name)
			for _, d := range out[i].details {
				fmt.Fprintf(&table, "  %s\n", d)
			}
		}
		_ = os.WriteFile(p, []byte(table.String()), 0o644)
	}
}

// slowestFirst orders the mutants for the parallel run: the one whose
// waits run into their deadlines first.
func slowestFirst() []int {
	var first, rest []int
	for i, m := range mutants {
		if m.name == "ReleaseFreesNothing" {
			first = append(first, i)
		} else {
			rest = append(rest, i)
		}
	}
	return append(first, rest...)
}

// parallelMutants is how many mutants run at once: FENCELOCK_MUTANTS_PARALLEL,
// default 3.
func parallelMutants() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("FENCELOCK_MUTANTS_PARALLEL"), &n); err == nil && n > 0 {
		return n
	}
	return 3
}

// inProcessSkip reports whether the mem harness, whose store lives in the
// test process, may skip check: there is no other process to freeze or
// crash, and no network to cut.
func inProcessSkip(check string) bool {
	return check == "ProcessFreeze" || check == "ProcessCrash" || check == "ElectionLeaderProcessFrozen" || strings.HasPrefix(check, "Partition")
}

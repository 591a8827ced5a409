package conformance

import (
	"errors"
	"time"

	"github.com/fencelock/fencelock"
)

func init() {
	register(
		check{name: "InspectAgreesWithGrant", run: testInspectAgrees},
		check{name: "InspectFreeAfterTTL", run: testInspectExpired},
	)
}

// testInspectAgrees: another client's Inspect reports what was granted,
// field by field as the backend declares (Capabilities.Inspect): held,
// the label, the fence, a remaining TTL within the granted one, the
// waiters; a relabel where declared; free after Release; and a grant
// handed to a waiter reads as the waiter's.
func testInspectAgrees(t TB, e *env) {
	ic := e.caps.Inspect
	if !ic.Supported {
		notApplicable(t, "the backend declares no Inspect")
	}
	a, b := e.client(), e.client()
	name := e.name("x")
	label := "conformance holder ✓ 1"
	if ic.LabelASCII {
		label = "conformance holder 1 'quoted' \\"
	}
	info, err := b.Inspect(e.ctx, name)
	mustNil(t, err, "Inspect of a free lock")
	if info.Held {
		t.Fatalf("Inspect of a never-taken lock: %+v, want free", info)
	}
	l, err := a.TryAcquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Label: label})
	mustNil(t, err, "TryAcquire")
	granted := leaseStoreTTL(l, longTTL)
	info, err = b.Inspect(e.ctx, name)
	mustNil(t, err, "Inspect of a held lock")
	switch {
	case !info.Held:
		t.Fatalf("Inspect of a held lock: %+v, want held", info)
	case ic.Label && info.Label != label:
		t.Fatalf("Inspect label %q, want the holder's %q", info.Label, label)
	case ic.Fence && info.Fence != l.Fence():
		t.Fatalf("Inspect fence %d, want the holder's %d", info.Fence, l.Fence())
	case !ic.Fence && info.Fence != 0:
		t.Fatalf("Inspect fence %d from a backend that declares it cannot report fences", info.Fence)
	case ic.Remaining && (info.Remaining <= 0 || info.Remaining > granted+e.caps.TTLGranularity):
		t.Fatalf("Inspect remaining %v, want in (0, %v] (the granted TTL)", info.Remaining, granted)
	case !ic.Waiters && info.Waiters != -1:
		t.Fatalf("Inspect waiters %d from a backend that declares it cannot count them, want -1", info.Waiters)
	case ic.Waiters && info.Waiters != 0:
		t.Fatalf("Inspect waiters %d, want 0 (nobody waits)", info.Waiters)
	}
	if ic.Relabel {
		const relabel = "conformance holder 2"
		mustNil(t, l.SetLabel(e.ctx, relabel), "SetLabel")
		info, err = b.Inspect(e.ctx, name)
		mustNil(t, err, "Inspect after SetLabel")
		if !info.Held || info.Label != relabel || ic.Fence && info.Fence != l.Fence() {
			t.Fatalf("Inspect after SetLabel(%q): %+v (fence %d)", relabel, info, l.Fence())
		}
	} else if err := l.SetLabel(e.ctx, "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("SetLabel on a backend that declares no Relabel: %v, want errors.ErrUnsupported", err)
	}
	mustNil(t, l.Release(e.ctx), "Release")
	info, err = b.Inspect(e.ctx, name)
	mustNil(t, err, "Inspect after Release")
	if info.Held {
		t.Fatalf("Inspect after Release: %+v, want free", info)
	}
	l2, err := a.TryAcquire(e.ctx, name, opts(longTTL, false))
	mustNil(t, err, "TryAcquire after Release")
	info, err = b.Inspect(e.ctx, name)
	mustNil(t, err, "Inspect of the second grant")
	if !info.Held || ic.Fence && info.Fence != l2.Fence() || ic.Label && info.Label != l2.Label() || l2.Label() == "" {
		t.Fatalf("Inspect of a grant with the default label: %+v, want fence %d, label %q (fencelock.DefaultLabel %q)", info, l2.Fence(), l2.Label(), fencelock.DefaultLabel())
	}
	e.inspectHandOff(t, b, name, l2, label)
}

// inspectHandOff: a grant that a Release hands to a waiter blocked in
// Acquire (the store's queue, where it has one) reads as the waiter's:
// its label and fence, not the releaser's or none.
func (e *env) inspectHandOff(t TB, b *fencelock.Client, name string, holder *fencelock.Lease, label string) {
	t.Helper()
	ic := e.caps.Inspect
	label += " (waited)"
	type res struct {
		l   *fencelock.Lease
		err error
	}
	got, c := make(chan res, 1), e.client()
	go func() {
		l, err := c.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Label: label})
		got <- res{l, err}
	}()
	e.waitQueued(t, name, 1, 200*time.Millisecond)
	mustNil(t, holder.Release(e.ctx), "Release with a waiter")
	e.waiting("the hand-off to the labelled waiter")
	g := <-got
	mustNil(t, g.err, "the labelled waiter's Acquire")
	defer g.l.Release(e.ctx)
	info, err := b.Inspect(e.ctx, name)
	mustNil(t, err, "Inspect of a grant handed to a waiter")
	if !info.Held || ic.Label && info.Label != label || ic.Fence && info.Fence != g.l.Fence() {
		t.Fatalf("Inspect of a grant handed to a waiter: %+v, want held, label %q, fence %d", info, label, g.l.Fence())
	}
}

// testInspectExpired: an abandoned lock reads as held until its holder's
// ValidUntil, and as free once the store's TTL has run out.
func testInspectExpired(t TB, e *env) {
	if !e.caps.Inspect.Supported {
		notApplicable(t, "the backend declares no Inspect")
	}
	a, b := e.client(), e.client()
	name := e.name("x")
	l, err := a.TryAcquire(e.ctx, name, opts(e.ttl, false))
	mustNil(t, err, "TryAcquire")
	start := time.Now()
	vu := l.ValidUntil()
	e.waiting("Inspect to report the abandoned lock free after its TTL")
	deadline := start.Add(e.effTTL() + e.margin)
	for {
		info, err := b.Inspect(e.ctx, name)
		now := time.Now()
		mustNil(t, err, "Inspect")
		if !info.Held {
			if now.Before(vu) {
				t.Fatalf("Inspect reports the lock free %v before its holder's ValidUntil", vu.Sub(now))
			}
			break
		}
		if now.After(deadline) {
			t.Fatalf("Inspect still reports the lock held %v after the grant (store TTL %v): %+v", now.Sub(start), e.effTTL(), info)
		}
		e.sleep(10 * time.Millisecond)
	}
	mustIs(t, l.Release(e.ctx), fencelock.ErrLeaseLost, "Release of the expired lease")
}

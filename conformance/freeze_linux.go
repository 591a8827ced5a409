//go:build linux

package conformance

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
	"github.com/fencelock/fencelock/internal/faultrec"
)

// testProcessFreeze: a child process acquires (auto-renew on), is frozen
// with SIGSTOP for 2×TTL; the parent acquires with a higher fence and
// claims the guarded resource; the child, resumed, must find its lease
// lost, its Release must return ErrLeaseLost without touching the parent's
// lock, and its fenced write must be rejected.
func testProcessFreeze(t TB, e *env) {
	url := e.h.URL()
	if url == "" {
		t.Skipf("harness gives no URL for a second process")
	}
	rec := faultrec.Begin(t, faultrec.Result{Backend: e.caps.Backend, Scenario: faultrec.HolderPaused})
	name := e.name("x")
	child := startHolderChild(t, e, name)
	next := func(want string) []string { return child.next(t, want) }
	cmd := child.cmd
	f := next("ACQUIRED")
	childFence := parseFence(f[1])
	var res guard.Counter
	_, err := res.Claim(e.ctx, childFence) // the child claimed the resource, then froze
	mustNil(t, err, "child's claim")

	mustNil(t, cmd.Process.Signal(syscall.SIGSTOP), "SIGSTOP child")
	stopped := time.Now()
	parent := e.client()
	e.waiting("the parent's Acquire while the child is frozen")
	l, err := parent.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: 2*e.effTTL() + e.margin})
	mustNil(t, err, "parent Acquire while the child is frozen")
	defer l.Release(e.ctx)
	grantedAfter := time.Since(stopped)
	rec.WaitGranted, rec.WaitFrom = grantedAfter, "SIGSTOP"
	rec.Fence = faultrec.FenceOf(childFence, l.Fence())
	e.checkFence(t, childFence, l.Fence(), "parent's grant over the frozen child")
	v, err := res.Claim(e.ctx, l.Fence())
	mustNil(t, err, "parent's claim")
	mustNil(t, res.WriteClaimed(e.ctx, l.Fence(), v+1), "parent's write")

	e.sleep(time.Until(stopped.Add(2 * e.effTTL()))) // the freeze lasts 2×TTL
	mustNil(t, cmd.Process.Signal(syscall.SIGCONT), "SIGCONT child")
	resumed := time.Now()
	f = next("ENDED")
	lostAfter := time.Since(resumed)
	if f[1] != "true" {
		t.Fatalf("resumed child's lease did not end with ErrLeaseLost")
	}
	rec.Outcome = faultrec.Lost
	if f = next("RELEASE"); f[1] != "true" {
		t.Fatalf("resumed child's Release did not return ErrLeaseLost")
	}
	f = next("WRITE")
	wf := parseFence(f[1])
	err = res.WriteClaimed(e.ctx, wf, 1000)
	rec.SecondHolder = faultrec.OverlapOf(!errors.Is(err, guard.ErrStale))
	mustIs(t, err, guard.ErrStale, "resumed child's fenced write")
	if got, _ := res.Read(e.ctx); got != v+1 {
		t.Fatalf("resource value %d, want the parent's %d", got, v+1)
	}
	if l.Err() != nil {
		t.Fatalf("parent's lease ended after the child's stale Release: %v", l.Err())
	}
	_, err = e.client().TryAcquire(e.ctx, name, nil)
	mustIs(t, err, fencelock.ErrNotAcquired, "TryAcquire after the child's stale Release")
	rec.Case = fmt.Sprintf("TTL %v", e.ttl)
	rec.Note = fmt.Sprintf("frozen for 2×TTL; the resumed holder saw its loss %v after SIGCONT; its Release returned ErrLeaseLost; its fenced write was rejected", lostAfter.Round(time.Millisecond))
	t.Logf("child fence %d frozen at %v; parent granted fence %d %v later; child saw its lease lost %v after SIGCONT; its write was rejected",
		childFence, stopped.Format("15:04:05.000"), l.Fence(), grantedAfter.Round(time.Millisecond), lostAfter.Round(time.Millisecond))
}

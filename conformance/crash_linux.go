//go:build linux

package conformance

import (
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/faultrec"
)

// testProcessCrash: a child process (the running binary, re-executed as
// the process-freeze child) acquires with auto-renew on and is killed with
// SIGKILL: no Release, no goodbye to the store, its connections closed by
// the kernel. Another client must then be granted the lock within
// 2×TTL + margin, with a higher fence. The time it took is the store's
// crash-detection delay: a connection-bound lock (a Postgres session) is
// freed when the server sees the connection close, a TTL lock when its TTL
// runs out, a session lock when the session times out.
func testProcessCrash(t TB, e *env) {
	url := e.h.URL()
	if url == "" {
		t.Skipf("harness gives no URL for a second process")
	}
	rec := faultrec.Begin(t, faultrec.Result{Backend: e.caps.Backend, Scenario: faultrec.HolderCrashed})
	name := e.name("x")
	child := startHolderChild(t, e, name)
	f := child.next(t, "ACQUIRED")
	childFence := parseFence(f[1])

	mustNil(t, child.cmd.Process.Kill(), "SIGKILL child")
	killed := time.Now()
	e.waiting("the killed child to exit")
	select {
	case <-child.reaped:
	case <-e.ctx.Done():
		t.Fatalf("check ended before the killed child exited")
	}
	parent := e.client()
	e.waiting("the parent's Acquire of the crashed child's lock")
	l, err := parent.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: 2*e.effTTL() + e.margin})
	grantedAfter := time.Since(killed)
	mustNil(t, err, "Acquire of a lock whose holder was killed")
	defer l.Release(e.ctx)
	rec.Outcome = faultrec.Lost
	rec.WaitGranted, rec.WaitFrom = grantedAfter, "SIGKILL"
	rec.Fence = faultrec.FenceOf(childFence, l.Fence())
	rec.Case = fmt.Sprintf("TTL %v", e.ttl)
	e.checkFence(t, childFence, l.Fence(), "grant after the holder was killed")
	t.Logf("child holding fence %d killed; parent granted fence %d %v later (TTL %v, store TTL %v)",
		childFence, l.Fence(), grantedAfter.Round(time.Millisecond), e.ttl, e.storeTTL)
}

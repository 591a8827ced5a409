//go:build linux

package conformance

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/guard"
)

// testElectionProcessFreeze: a leader in another process (auto-renew on)
// is frozen with SIGSTOP for 2×TTL. A candidate here is elected no earlier
// than the frozen leader's ValidUntil (beyond BreakOverlap), in a higher
// term, and writes. The leader, resumed, must learn its term ended; its
// Proclaim and Resign return ErrLeaseLost without touching the new term
// (Leader still reports the new leader), and its write carrying the old
// term is refused by a claim-first resource.
func testElectionProcessFreeze(t TB, e *env) {
	if e.h.URL() == "" {
		t.Skipf("harness gives no URL for a second process")
	}
	name := e.name("election")
	child := startChild(t, e, freezeSpec{Name: name, Election: true})
	next := func(want string) []string { return child.next(t, want) }
	f := next("ACQUIRED")
	oldTerm := parseFence(f[1])
	vuNanos, _ := strconv.ParseInt(f[2], 10, 64)
	oldValidUntil := time.Unix(0, vuNanos)
	var res guard.Counter
	va, err := res.Claim(e.ctx, oldTerm) // the leader claimed the resource, then froze
	mustNil(t, err, "the leader's claim")

	mustNil(t, child.cmd.Process.Signal(syscall.SIGSTOP), "SIGSTOP the leader")
	stopped := time.Now()
	healthy, err := election.New(e.client(), name, &election.Options{TTL: longTTL})
	mustNil(t, err, "election.New")
	e.waiting("a new leader while the old one is frozen")
	b, err := healthy.Campaign(e.ctx, "healthy")
	mustNil(t, err, "Campaign while the leader is frozen")
	elected := time.Now()
	defer b.Resign(e.ctx)
	// The child's last renewal before SIGSTOP may have moved its deadline
	// past the one it reported; the reported one is a lower bound.
	if elected.Before(oldValidUntil.Add(-e.caps.BreakOverlap)) {
		t.Fatalf("new leader elected %v before the frozen leader's ValidUntil", oldValidUntil.Sub(elected))
	}
	e.checkFence(t, oldTerm, b.Fence(), "term after the frozen leader's")
	vb, err := res.Claim(e.ctx, b.Fence())
	mustNil(t, err, "the new leader's claim")
	mustNil(t, res.WriteClaimed(e.ctx, b.Fence(), vb+1), "the new leader's write")

	e.sleep(time.Until(stopped.Add(2 * e.effTTL())))
	mustNil(t, child.cmd.Process.Signal(syscall.SIGCONT), "SIGCONT the leader")
	if f = next("ENDED"); f[1] != "true" {
		t.Fatalf("the resumed leader's term did not end with ErrLeaseLost")
	}
	// A backend that cannot relabel a held lock says so before it looks
	// at the lease.
	if f = next("PROCLAIM"); f[1] != "lost" && !(f[1] == "unsupported" && !e.caps.Inspect.Relabel) {
		t.Fatalf("the resumed leader's Proclaim returned %s, want ErrLeaseLost", strings.Join(f[1:], " "))
	}
	if f = next("RELEASE"); f[1] != "true" {
		t.Fatalf("the resumed leader's Resign did not return ErrLeaseLost")
	}
	f = next("WRITE")
	wf := parseFence(f[1])
	if err := res.WriteClaimed(e.ctx, wf, va+1000); !errors.Is(err, guard.ErrStale) {
		t.Fatalf("the resumed leader's write with term %d: %v, want guard.ErrStale", wf, err)
	}
	if got, _ := res.Read(e.ctx); got != vb+1 {
		t.Fatalf("resource value %d, want the new leader's %d", got, vb+1)
	}
	if b.Err() != nil {
		t.Fatalf("the new term ended after the old leader resumed: %v", b.Err())
	}
	if e.caps.Inspect.Supported && e.caps.Inspect.Label {
		ld, err := healthy.Leader(e.ctx)
		mustNil(t, err, "Leader")
		if ld.Value != "healthy" || e.caps.Inspect.Fence && ld.Term != b.Fence() {
			t.Fatalf("Leader after the old leader's Proclaim: %+v, want healthy in term %d", ld, b.Fence())
		}
	}
}

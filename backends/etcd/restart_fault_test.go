package etcd

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/faultrec"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestFaultServerRestarted: a single-member etcd killed (SIGKILL) and
// restarted from its data dir while a lease is held. etcd keeps leases in
// its data and restarts their TTLs when it comes back: the holder's lease
// survives (its renewals resume), nobody else is granted the lock, and
// the next grant's fence is higher.
func TestFaultServerRestarted(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test: skipped in -short mode")
	}
	cl := testserver.StartEtcdCluster(t, 1)
	if cl.External {
		testserver.SkipExternal(t, "ETCD_URL names an external server: the test restarts a member of its own")
	}
	rec := faultrec.Begin(t, faultrec.Result{Backend: "etcd", Scenario: faultrec.ServerRestarted, Case: "single member, from its data"})
	ctx := t.Context()
	url := cl.URL("restart")
	h, other := openURL(t, url), openURL(t, url)
	const ttl = 5 * time.Second
	l, err := h.TryAcquire(ctx, "job", &fencelock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	m := cl.Members[0]
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	started := time.Since(killed)
	// The holder renews once its client has reconnected.
	for {
		err := l.Extend(ctx, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, fencelock.ErrUnavailable) || time.Since(killed) > ttl {
			if errors.Is(err, fencelock.ErrLeaseLost) {
				rec.Outcome = faultrec.Lost
			}
			t.Fatalf("holder's renewal after the restart (%v after the kill): %v", time.Since(killed), err)
		}
		time.Sleep(100 * time.Millisecond) // pacing retries while the client reconnects
	}
	renewed := time.Since(killed)
	if l.Err() != nil {
		rec.Outcome = faultrec.Lost
		t.Fatalf("lease ended across the restart: %v", l.Err())
	}
	rec.Outcome = faultrec.Kept
	_, err = other.TryAcquire(ctx, "job", nil)
	rec.SecondHolder = faultrec.OverlapOf(err == nil)
	if !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire by another client after the restart: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := other.TryAcquire(ctx, "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	rec.Fence = faultrec.FenceOf(l.Fence(), l2.Fence())
	rec.Note = fmt.Sprintf("single-member etcd killed (SIGKILL) and restarted from its data dir, TTL %v: serving again %v after the kill; the holder renewed %v after the kill and kept its lease; another client was refused",
		ttl, started.Round(time.Millisecond), renewed.Round(time.Millisecond))
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after the restart, not above %d", l2.Fence(), l.Fence())
	}
	t.Logf("%s", rec.Note)
}

// Package testhelp holds the small helpers that several backends' tests
// share (backends never import each other, so their _test.go files cannot
// share them directly). Only tests import it.
package testhelp

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/adminhook"
)

// Admin returns the admin hooks of c's backend (see adminhook), failing
// t if it has none.
func Admin(t testing.TB, c *fencelock.Client) driver.Admin {
	t.Helper()
	adm, ok := adminhook.Of(c)
	if !ok {
		t.Fatal("adminhook.Of = false")
	}
	return adm
}

// ReportHandoffs reports the median and p99 of the hand-off latencies
// all, in µs, as handoff-p50-µs and handoff-p99-µs.
func ReportHandoffs(b *testing.B, all []time.Duration) {
	b.ReportMetric(float64(conformance.Percentile(all, 0.5).Microseconds()), "handoff-p50-µs")
	b.ReportMetric(float64(conformance.Percentile(all, 0.99).Microseconds()), "handoff-p99-µs")
}

// Eventually polls cond, every 5ms, until it returns nil, and fails t with
// cond's last error if that does not happen within timeout. cond's error
// says what it saw; cond may fail t itself on an error that polling
// cannot cure. It is for a state that has no signal to wait on (a store's
// view, a background goroutine's progress), not a sync.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

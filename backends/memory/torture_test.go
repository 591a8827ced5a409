package memory_test

import (
	"testing"

	"github.com/fencelock/fencelock/conformance"
)

// TestTorture: the short CI torture on the in-process store (the
// nemesis expires names: there is no network to cut).
func TestTorture(t *testing.T) {
	conformance.CITorture(t, newHarness(false), conformance.TortureOptions{})
}

// TestTortureRPC: the same over memrpc://, one client behind the fault
// proxy (blackhole, reset, latency), so the checker sees the reference
// driver through network faults: a reset connection is redialled at the
// next call.
func TestTortureRPC(t *testing.T) {
	conformance.CITorture(t, newHarness(true), conformance.TortureOptions{})
}

package memory_test

import (
	"testing"

	"github.com/fencelock/fencelock/conformance"
)

// TestTorture: the short CI torture on the in-process store (the
// nemesis expires names: there is no network to cut). Over memrpc://
// the proxy's reset leaves the client's connection shut down for good
// (the memrpc client does not redial), which the liveness check reports.
func TestTorture(t *testing.T) {
	conformance.CITorture(t, newHarness(false), conformance.TortureOptions{})
}

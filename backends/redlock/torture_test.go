package redlock_test

import (
	"testing"

	"github.com/fencelock/fencelock/conformance"
)

// TestTortureByURL: the short CI torture by URL on 5 primaries; the
// nemesis cuts the proxied client from a majority of them.
func TestTortureByURL(t *testing.T) {
	conformance.CITorture(t, conformance.URLHarness(storeURL(t, 5)), conformance.TortureOptions{})
}

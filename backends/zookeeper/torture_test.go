package zookeeper_test

import (
	"testing"

	"github.com/fencelock/fencelock/conformance"
)

// TestTortureByURL: the short CI torture by URL on the shared server.
func TestTortureByURL(t *testing.T) {
	conformance.CITorture(t, conformance.URLHarness(sharedURL(t)), conformance.TortureOptions{})
}

package dynamodb_test

import (
	"testing"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTortureByURL: the short CI torture by URL on dynalite.
func TestTortureByURL(t *testing.T) {
	d := testserver.StartDynalite(t)
	conformance.CITorture(t, conformance.URLHarness(d.URL()), conformance.TortureOptions{})
}

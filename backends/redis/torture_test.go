package redis_test

import (
	"testing"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTortureByURL: the short CI torture by URL (random operations under
// a seeded fault schedule, the history checked; see conformance.Torture).
func TestTortureByURL(t *testing.T) {
	r := testserver.StartRedis(t)
	conformance.CITorture(t, conformance.URLHarness(r.URL()), conformance.TortureOptions{})
}

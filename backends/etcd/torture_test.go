package etcd

import (
	"testing"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTortureByURL: the short CI torture by URL on a stock etcd (2 s
// minimum lease TTL).
func TestTortureByURL(t *testing.T) {
	e := testserver.StartStockEtcd(t)
	conformance.CITorture(t, conformance.URLHarness(e.URL("torture")), conformance.TortureOptions{})
}

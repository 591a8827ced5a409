package dynamodb_test

import (
	"strings"
	"testing"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/dynamodb"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestConformance runs the suite on one real server by URL, as
// `fencelock conformance --url` does: clients opened from the URL, each
// with its own HTTP connections; the out-of-band hooks are the backend's
// own driver.Admin; the partition checks put a fault proxy in front of
// the endpoint.
func TestConformance(t *testing.T) {
	d := testserver.StartDynalite(t)
	conformance.RunConformanceTests(t, conformance.URLHarness(d.URL()))
}

// open opens a Client on rawURL, closed when tb ends.
func open(tb testing.TB, rawURL string, opts *fencelock.Options) *fencelock.Client {
	tb.Helper()
	c, err := fencelock.DefaultURLMux().Open(tb.Context(), rawURL, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// native returns the SDK client behind c.
func native(tb testing.TB, c *fencelock.Client) *ddb.Client {
	tb.Helper()
	var dc *ddb.Client
	if !c.As(&dc) {
		tb.Fatal("As(**ddb.Client) failed")
	}
	return dc
}

// name returns a lock name unique to the test.
func name(tb testing.TB) string {
	return strings.ReplaceAll(tb.Name(), "/", "-") + "-" + randHex(4)
}

var _ = dynamodb.Scheme

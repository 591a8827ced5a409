package dynamodb_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/dynamodb"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
)

// harness runs the suite on one real server, shared by the checks of a
// test (each check uses its own random key prefix). Clients are opened
// from the URL, each with its own HTTP connections; the out-of-band hooks
// are the backend's own driver.Admin, as `fencelock conformance --url`
// uses them.
type harness struct {
	url string
}

var (
	_ conformance.Expirer       = (*harness)(nil)
	_ conformance.SessionKiller = (*harness)(nil)
)

func newHarness(rawURL string) conformance.HarnessMaker {
	return func(ctx context.Context, t testing.TB) (conformance.Harness, error) {
		return &harness{url: rawURL}, nil
	}
}

func (h *harness) MakeClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	return fencelock.DefaultURLMux().Open(ctx, h.url, opts)
}

func (h *harness) URL() string { return h.url }
func (h *harness) Close()      {}

// Expire marks the item released behind the holder's back (driver.Admin).
func (h *harness) Expire(ctx context.Context, key string) error {
	c, err := h.MakeClient(ctx, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	var adm driver.Admin
	if !c.As(&adm) {
		return errors.New("dynamodb backend has no driver.Admin")
	}
	return adm.Expire(ctx, key)
}

// KillSession cuts c off from DynamoDB for the leases it holds
// (driver.Admin).
func (h *harness) KillSession(ctx context.Context, c *fencelock.Client) error {
	var adm driver.Admin
	if !c.As(&adm) {
		return errors.New("dynamodb backend has no driver.Admin")
	}
	return adm.KillSessions(ctx)
}

func TestConformance(t *testing.T) {
	d := testserver.StartDynalite(t)
	conformance.RunConformanceTests(t, newHarness(d.URL()))
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

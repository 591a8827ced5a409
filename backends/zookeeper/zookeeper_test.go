package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
)

// harness runs the suite on one real ZooKeeper (standalone or ensemble),
// shared by the checks of a test; each check uses its own random prefix.
// Every client is opened from the URL, so it has sessions of its own, as
// another process would. The out-of-band hooks are the backend's own
// driver.Admin (node delete, Curator's KillSession), as the URL harness of
// `fencelock conformance --url` uses them.
type harness struct {
	url   string
	admin *fencelock.Client
}

var (
	_ conformance.Expirer       = (*harness)(nil)
	_ conformance.SessionKiller = (*harness)(nil)
)

func newHarness(url string) conformance.HarnessMaker {
	return func(ctx context.Context, t testing.TB) (conformance.Harness, error) {
		return &harness{url: url}, nil
	}
}

func (h *harness) MakeClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	return fencelock.DefaultURLMux().Open(ctx, h.url, opts)
}

func (h *harness) URL() string { return h.url }

func (h *harness) Close() {
	if h.admin != nil {
		_ = h.admin.Close()
	}
}

func (h *harness) Expire(ctx context.Context, key string) error {
	if h.admin == nil {
		c, err := fencelock.Open(ctx, h.url)
		if err != nil {
			return err
		}
		h.admin = c
	}
	var adm driver.Admin
	if !h.admin.As(&adm) {
		return errors.New("no driver.Admin")
	}
	return adm.Expire(ctx, key)
}

func (h *harness) KillSession(ctx context.Context, c *fencelock.Client) error {
	var adm driver.Admin
	if !c.As(&adm) {
		return errors.New("no driver.Admin")
	}
	return adm.KillSessions(ctx)
}

func TestConformance(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	conformance.RunConformanceTests(t, newHarness(z.URL()))
}

func TestConformanceEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 ZooKeeper servers")
	}
	z := testserver.StartZooKeeperEnsemble(t, 3)
	conformance.RunConformanceTests(t, newHarness(z.URL()))
}

// name returns a lock name unique to the test.
func name(t testing.TB) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + fmt.Sprint("-", len(t.Name()))
}

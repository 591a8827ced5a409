package redlock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fencelock/fencelock"
	_ "github.com/fencelock/fencelock/backends/redlock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/adminhook"
	"github.com/fencelock/fencelock/internal/testserver"
)

// harness runs the suite on N real primaries, shared by the checks of a
// test (each check uses its own random key prefix). Every client is opened
// from the URL, and the out-of-band hooks come from the backend's own
// driver.Admin, as they do for `fencelock conformance --url`.
type harness struct {
	url string

	mu    sync.Mutex
	admin *fencelock.Client
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

func (h *harness) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.admin != nil {
		_ = h.admin.Close()
	}
}

func adminOf(c *fencelock.Client) (driver.Admin, error) {
	adm, ok := adminhook.Of(c)
	if !ok {
		return nil, errors.New("redlock client has no driver.Admin")
	}
	return adm, nil
}

// Expire deletes the lock key on every primary behind the holder's back.
func (h *harness) Expire(ctx context.Context, key string) error {
	h.mu.Lock()
	if h.admin == nil {
		c, err := fencelock.Open(ctx, h.url)
		if err != nil {
			h.mu.Unlock()
			return err
		}
		h.admin = c
	}
	c := h.admin
	h.mu.Unlock()
	adm, err := adminOf(c)
	if err != nil {
		return err
	}
	return adm.Expire(ctx, key)
}

// KillSession kills c's connections on every primary.
func (h *harness) KillSession(ctx context.Context, c *fencelock.Client) error {
	adm, err := adminOf(c)
	if err != nil {
		return err
	}
	return adm.KillSessions(ctx)
}

// storeURL is REDLOCK_URL if set, else the URL of n new primaries.
func storeURL(t *testing.T, n int) string {
	if u := os.Getenv("REDLOCK_URL"); u != "" {
		return u
	}
	return testserver.StartRedisNodes(t, n, nil).URL()
}

func TestConformance5(t *testing.T) {
	conformance.RunConformanceTests(t, newHarness(storeURL(t, 5)))
}

func TestConformance3(t *testing.T) {
	if os.Getenv("REDLOCK_URL") != "" {
		testserver.SkipExternal(t, "REDLOCK_URL set: TestConformance5 covers it")
	}
	conformance.RunConformanceTests(t, newHarness(testserver.StartRedisNodes(t, 3, nil).URL()))
}

// TestURLHarness runs the suite's own URL harness (what `fencelock
// conformance --url` uses) on 5 primaries.
func TestURLHarness(t *testing.T) {
	conformance.RunConformanceTests(t, conformance.URLHarness(storeURL(t, 5)))
}

// open opens a client by URL, closed when t ends.
func open(t testing.TB, url string, opts *fencelock.Options) *fencelock.Client {
	t.Helper()
	c, err := fencelock.DefaultURLMux().Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// name is a lock name unique to the test.
func name(t testing.TB) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
}

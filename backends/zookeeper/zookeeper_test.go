package zookeeper_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/zookeeper"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// The suite runs through conformance.URLHarness, as `fencelock conformance
// --url` does: every client is opened from the URL (sessions of its own,
// as another process would have), and the out-of-band hooks are the
// backend's own driver.Admin (node delete, Curator's KillSession).

func TestConformance(t *testing.T) {
	conformance.MaybeRunChild() // the process-freeze child needs no server of its own
	conformance.RunConformanceTests(t, conformance.URLHarness(sharedURL(t)))
}

func TestConformanceEnsemble(t *testing.T) {
	conformance.MaybeRunChild()
	if testing.Short() {
		t.Skip("-short: starts 3 ZooKeeper servers")
	}
	z := testserver.StartZooKeeperEnsemble(t, 3)
	conformance.RunConformanceTests(t, conformance.URLHarness(z.URL()))
}

// TestConformanceStockByURL runs the suite by URL on a stock standalone
// server (tickTime 2 s, so the minimum session timeout, hence the
// shortest TTL, is 4 s), as a user's `fencelock conformance --url` would.
func TestConformanceStockByURL(t *testing.T) {
	conformance.MaybeRunChild()
	if testing.Short() {
		t.Skip("-short: the stock server's 4 s minimum TTL makes the suite slow")
	}
	z := testserver.StartStockZooKeeper(t)
	conformance.RunConformanceTests(t, conformance.URLHarness(z.URL()))
}

// The shared standalone server (or ZK_URL), started on first use and
// stopped by TestMain.
var (
	srvMu  sync.Mutex
	shared *testserver.ZooKeeper
)

func TestMain(m *testing.M) {
	code := m.Run()
	srvMu.Lock()
	if shared != nil {
		shared.Cleanup()
	}
	srvMu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak after all tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func sharedErr() (*testserver.ZooKeeper, error) {
	srvMu.Lock()
	defer srvMu.Unlock()
	if shared != nil {
		return shared, nil
	}
	if u := os.Getenv(testserver.ZooKeeperURLEnv); u != "" {
		shared = &testserver.ZooKeeper{}
		return shared, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	z, err := testserver.NewZooKeeper(ctx, 1)
	if err != nil {
		return nil, err
	}
	shared = z
	return z, nil
}

// sharedURL returns the zk:// URL of the shared server.
func sharedURL(tb testing.TB) string {
	tb.Helper()
	z, err := sharedErr()
	if err != nil {
		testserver.Unavailable(tb, "ZooKeeper", err)
	}
	if u := os.Getenv(testserver.ZooKeeperURLEnv); u != "" {
		return u
	}
	return z.URL()
}

// exampleServers serves the examples (which cannot take a testing.TB).
func exampleServers() []string {
	if u := os.Getenv(testserver.ZooKeeperURLEnv); u != "" {
		pu, err := url.Parse(u)
		if err != nil {
			panic(err)
		}
		return strings.Split(pu.Host, ",")
	}
	z, err := sharedErr()
	if err != nil {
		panic(err)
	}
	return z.Servers()
}

// servers returns the host:port list of a zk:// URL.
func servers(tb testing.TB, rawURL string) []string {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatal(err)
	}
	return strings.Split(u.Host, ",")
}

// rawConn is a plain go-zookeeper connection (another process's client),
// closed at cleanup.
func rawConn(tb testing.TB, rawURL string) *zk.Conn {
	tb.Helper()
	c, _, err := zk.Connect(servers(tb, rawURL), 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// open opens a Client by URL, closed at cleanup.
func open(tb testing.TB, rawURL string, opts *fencelock.Options) *fencelock.Client {
	tb.Helper()
	c, err := fencelock.DefaultURLMux().Open(context.Background(), rawURL, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// name returns a lock name unique to the test run.
func name(t testing.TB) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + "-" + fmt.Sprint(time.Now().UnixNano())
}

func init() { zookeeper.ExampleServers = exampleServers }

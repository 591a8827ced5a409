package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// Servers shared by the package's tests, started on first use (so that a
// re-executed freeze child starts none) and stopped by TestMain. Each
// member is a child process (see testserver.NewEtcdCluster), so goroutine
// checks here see only the client side.
var (
	srvMu   sync.Mutex
	servers = map[int]*testserver.EtcdCluster{}
	srvDir  string
)

func TestMain(m *testing.M) {
	// The torture's child-process worker re-executes this binary: serve
	// as the child before any test starts a server.
	conformance.MaybeRunChild()
	code := m.Run()
	srvMu.Lock()
	for _, c := range servers {
		c.Close()
	}
	srvMu.Unlock()
	if srvDir != "" {
		_ = os.RemoveAll(srvDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak after all tests and servers stopped:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedEtcd returns the shared cluster of n members.
func sharedEtcd(tb testing.TB, n int) *testserver.EtcdCluster {
	tb.Helper()
	c, err := sharedEtcdErr(n)
	if err != nil {
		testserver.Unavailable(tb, "etcd", err)
	}
	return c
}

func sharedEtcdErr(n int) (*testserver.EtcdCluster, error) {
	srvMu.Lock()
	defer srvMu.Unlock()
	if c := servers[n]; c != nil {
		return c, nil
	}
	if srvDir == "" {
		d, err := os.MkdirTemp("", "fencelock-etcd-test-")
		if err != nil {
			return nil, err
		}
		srvDir = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := testserver.NewEtcdCluster(ctx, n, fmt.Sprintf("%s/n%d", srvDir, n))
	if err != nil {
		return nil, err
	}
	servers[n] = c
	return c, nil
}

// exampleEndpoints serves the examples (which cannot take a testing.TB).
func exampleEndpoints() []string {
	c, err := sharedEtcdErr(1)
	if err != nil {
		panic(err)
	}
	return c.Endpoints()
}

// newClientv3 is a raw etcd client on c, closed at cleanup.
func newClientv3(tb testing.TB, endpoints ...string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

// harness is the conformance Harness on an embedded etcd. Clients open by
// URL (each with its own etcd client and connections).
type harness struct {
	url       string
	keyPrefix string
	admin     *clientv3.Client
}

var (
	_ conformance.Expirer       = (*harness)(nil)
	_ conformance.SessionKiller = (*harness)(nil)
)

func harnessMaker(members int) conformance.HarnessMaker {
	return func(ctx context.Context, tb testing.TB) (conformance.Harness, error) {
		c := sharedEtcd(tb, members)
		admin, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints()[:1], Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		if err := waitConnected(ctx, admin); err != nil {
			_ = admin.Close()
			return nil, err
		}
		return &harness{url: c.URL("fencelock-test"), keyPrefix: "fencelock-test/", admin: admin}, nil
	}
}

// MakeClient opens a client by URL (through a URLOpener of its own) and
// waits until its etcd client has served a request over a connection to
// every endpoint: the etcd client connects in the background, and the
// suite's goroutine check must not see a connection of an earlier client
// come up late.
func (h *harness) MakeClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	st := &servedBy{addrs: map[string]bool{}}
	mux := &fencelock.URLMux{}
	mux.Register(Scheme, &URLOpener{Client: clientv3.Config{
		DialOptions: []grpc.DialOption{grpc.WithStatsHandler(st)},
	}})
	c, err := mux.Open(ctx, h.url, opts)
	if err != nil {
		return nil, err
	}
	var cli *clientv3.Client
	c.As(&cli)
	if err := st.waitAll(ctx, cli); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// servedBy records the server addresses a gRPC client's RPCs went to.
type servedBy struct {
	mu    sync.Mutex
	addrs map[string]bool
}

func (s *servedBy) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (s *servedBy) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (s *servedBy) HandleConn(context.Context, stats.ConnStats)                       {}
func (s *servedBy) HandleRPC(_ context.Context, rs stats.RPCStats) {
	if h, ok := rs.(*stats.OutHeader); ok && h.RemoteAddr != nil {
		s.mu.Lock()
		s.addrs[h.RemoteAddr.String()] = true
		s.mu.Unlock()
	}
}

// waitAll sends reads until every endpoint of cli has served one.
func (s *servedBy) waitAll(ctx context.Context, cli *clientv3.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if err := waitConnected(ctx, cli); err != nil {
			return err
		}
		s.mu.Lock()
		n := len(s.addrs)
		s.mu.Unlock()
		if n >= len(cli.Endpoints()) {
			return nil
		}
	}
}

// waitConnected waits until cli has served a request.
func waitConnected(ctx context.Context, cli *clientv3.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := cli.Get(ctx, "fencelock-test-ping")
	return err
}

func (h *harness) URL() string { return h.url }

func (h *harness) Close() { _ = h.admin.Close() }

// Expire revokes the etcd lease of the lock's holder (the first key under
// its prefix), as etcd does when the TTL passes: the key goes with it.
func (h *harness) Expire(ctx context.Context, key string) error {
	resp, err := h.admin.Get(ctx, LockPrefix(h.keyPrefix, key)+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return errors.New("expire: no lock key under " + LockPrefix(h.keyPrefix, key))
	}
	_, err = h.admin.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	return err
}

// KillSession cuts c's connections to etcd (closes its etcd client, with no
// revoke): its leases get no more keepalives and etcd expires them.
func (h *harness) KillSession(ctx context.Context, c *fencelock.Client) error {
	var cli *clientv3.Client
	if !c.As(&cli) {
		return errors.New("not an etcd client")
	}
	return cli.Close()
}

func TestConformance(t *testing.T) {
	conformance.RunConformanceTests(t, harnessMaker(1))
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("3-member cluster: skipped in -short mode")
	}
	conformance.RunConformanceTests(t, harnessMaker(3))
}

func BenchmarkConformance(b *testing.B) {
	conformance.RunBenchmarks(b, harnessMaker(1))
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"job":       "job",
		"a/b":       "a%2Fb",
		"100%":      "100%25",
		"%2F":       "%252F",
		"/x/":       "%2Fx%2F",
		"ü/日本":      "ü%2F日本",
		"{a}:fence": "{a}:fence",
	} {
		if got := escape(in); got != want {
			t.Errorf("escape(%q) = %q, want %q", in, got, want)
		}
	}
	if got := LockPrefix("locks/", "a/b"); got != "locks/a%2Fb" {
		t.Errorf("LockPrefix = %q", got)
	}
}

func TestTTLSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		time.Millisecond:              1,
		time.Second:                   1,
		time.Second + time.Nanosecond: 2,
		1500 * time.Millisecond:       2,
		15 * time.Second:              15,
	} {
		if got := ttlSeconds(d); got != want {
			t.Errorf("ttlSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// mustNew is New, failing tb on an error.
func mustNew(tb testing.TB, cli *clientv3.Client, cfg *Config, opts *fencelock.Options) *fencelock.Client {
	tb.Helper()
	c, err := New(cli, cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

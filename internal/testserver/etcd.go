package testserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd timing for every embedded member: a 100 ms heartbeat and a 600 ms
// election timeout. etcd raises a lease TTL below 1.5 × the election timeout
// (rounded up to whole seconds); with these settings that minimum is 1 s, so
// 1 s leases (the etcd backend's MinTTL) are honoured exactly. etcd's own
// defaults (100 ms / 1000 ms) give 2 s.
const (
	etcdTickMs     = 100
	etcdElectionMs = 600
)

// EtcdCluster is an embedded etcd cluster (1 or more members) running in
// this process on free 127.0.0.1 ports with data in temp dirs, or an
// external server named by ETCD_URL (then Members is empty and the fault
// controls are unavailable).
type EtcdCluster struct {
	// Members are the embedded members, in start order.
	Members []*EtcdMember
	// External is set when ETCD_URL named an existing server.
	External bool

	endpoints []string
}

// EtcdMember is one embedded etcd member with fault controls. Kill is a
// crash as far as the other members and clients can tell: raft stops
// without a leadership transfer and every connection is cut; the data dir
// stays, so Restart brings the member back with its data.
type EtcdMember struct {
	Name      string
	ClientURL string // http://127.0.0.1:port
	PeerURL   string

	cfg *embed.Config

	mu sync.Mutex
	e  *embed.Etcd
}

// StartEtcd starts a single-member embedded etcd for tb and stops it at
// cleanup. If ETCD_URL is set (etcd://h1:2379,h2:2379 or a comma-separated
// list of host:port), that server is used instead.
func StartEtcd(tb testing.TB) *EtcdCluster { return StartEtcdCluster(tb, 1) }

// StartEtcdCluster starts an n-member embedded etcd cluster for tb and
// stops it at cleanup. ETCD_URL overrides it, as for StartEtcd.
func StartEtcdCluster(tb testing.TB, n int) *EtcdCluster {
	tb.Helper()
	if v := os.Getenv("ETCD_URL"); v != "" {
		eps, err := etcdEndpointsFromURL(v)
		if err != nil {
			tb.Fatalf("testserver: ETCD_URL: %v", err)
		}
		return &EtcdCluster{External: true, endpoints: eps}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := startEtcdCluster(ctx, n, tb.TempDir(), etcdLogger())
	if err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// NewEtcdCluster starts an n-member embedded etcd cluster with data under
// dir, without package testing (for TestMain-scoped servers shared by a
// package's tests); the caller calls Close. ETCD_URL overrides it, as for
// StartEtcd.
func NewEtcdCluster(ctx context.Context, n int, dir string) (*EtcdCluster, error) {
	if v := os.Getenv("ETCD_URL"); v != "" {
		eps, err := etcdEndpointsFromURL(v)
		if err != nil {
			return nil, fmt.Errorf("testserver: ETCD_URL: %w", err)
		}
		return &EtcdCluster{External: true, endpoints: eps}, nil
	}
	return startEtcdCluster(ctx, n, dir, etcdLogger())
}

// StartEmbeddedEtcd starts a single-member etcd in this process with its
// data in dir (which must exist), listening on a free 127.0.0.1 port, and
// logging nothing. It returns the member's etcd:// URL and a stop function.
// The fencelock CLI uses it as its zero-setup default store.
func StartEmbeddedEtcd(ctx context.Context, dir string) (url string, stop func() error, err error) {
	c, err := startEtcdCluster(ctx, 1, dir, zap.NewNop())
	if err != nil {
		return "", nil, err
	}
	return c.URL(""), func() error { c.Close(); return nil }, nil
}

// etcdLogger is silent unless ETCD_LOG is set (then warnings go to stderr).
func etcdLogger() *zap.Logger {
	if os.Getenv("ETCD_LOG") == "" {
		return zap.NewNop()
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level = zap.NewAtomicLevelAt(zap.WarnLevel)
	lg, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return lg
}

func etcdEndpointsFromURL(v string) ([]string, error) {
	if strings.Contains(v, "://") {
		u, err := url.Parse(v)
		if err != nil {
			return nil, err
		}
		v = u.Host
	}
	var eps []string
	for _, h := range strings.Split(v, ",") {
		if h = strings.TrimSpace(h); h != "" {
			eps = append(eps, h)
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("no endpoints in " + v)
	}
	return eps, nil
}

func startEtcdCluster(ctx context.Context, n int, dir string, lg *zap.Logger) (*EtcdCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcd cluster of %d members", n)
	}
	// Ports can be taken between FreePort and the listen: retry the whole
	// start a few times.
	var lastErr error
	for attempt := range 3 {
		c, err := tryStartEtcdCluster(ctx, n, fmt.Sprintf("%s/c%d", dir, attempt), lg)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func tryStartEtcdCluster(ctx context.Context, n int, dir string, lg *zap.Logger) (*EtcdCluster, error) {
	c := &EtcdCluster{}
	var initial []string
	for i := range n {
		cp, err := FreePort()
		if err != nil {
			return nil, err
		}
		pp, err := FreePort()
		if err != nil {
			return nil, err
		}
		m := &EtcdMember{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: "http://" + Addr(cp),
			PeerURL:   "http://" + Addr(pp),
		}
		c.Members = append(c.Members, m)
		c.endpoints = append(c.endpoints, Addr(cp))
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		cfg := embed.NewConfig()
		cfg.Name = m.Name
		cfg.Dir = dir + "/" + m.Name
		cu, _ := url.Parse(m.ClientURL)
		pu, _ := url.Parse(m.PeerURL)
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "fencelock-test"
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.TickMs, cfg.ElectionMs = etcdTickMs, etcdElectionMs
		cfg.Logger, cfg.LogLevel = "zap", "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
		m.cfg = cfg
	}
	// Members of a new cluster wait for each other: start them together.
	errs := make(chan error, n)
	for _, m := range c.Members {
		go func() { errs <- m.start(ctx) }()
	}
	var err error
	for range n {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// start starts the member and waits until it serves clients.
func (m *EtcdMember) start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e != nil {
		return fmt.Errorf("etcd member %s already running", m.Name)
	}
	e, err := embed.StartEtcd(m.cfg)
	if err != nil {
		return fmt.Errorf("start etcd member %s: %w", m.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd member %s failed during start: %w", m.Name, err)
	case <-ctx.Done():
		e.Server.HardStop()
		e.Close()
		return fmt.Errorf("etcd member %s not ready: %w", m.Name, ctx.Err())
	}
	m.e = e
	return nil
}

// Endpoints returns the members' client addresses (host:port).
func (c *EtcdCluster) Endpoints() []string { return append([]string(nil), c.endpoints...) }

// URL returns etcd://h1:p1,h2:p2/prefix for the fencelock etcd backend.
func (c *EtcdCluster) URL(prefix string) string {
	return "etcd://" + strings.Join(c.endpoints, ",") + "/" + strings.TrimPrefix(prefix, "/")
}

// Leader returns the running member that is the raft leader, waiting for an
// election if there is none yet, until ctx ends.
func (c *EtcdCluster) Leader(ctx context.Context) (*EtcdMember, error) {
	if c.External {
		return nil, errors.New("testserver: ETCD_URL server: no leader control")
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		for _, m := range c.Members {
			if m.IsLeader() {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testserver: no etcd leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops every member (hard stop: tests do not need a graceful one).
func (c *EtcdCluster) Close() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Go(func() { _ = m.Kill() })
	}
	wg.Wait()
}

// Running reports whether the member is running.
func (m *EtcdMember) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e != nil
}

// IsLeader reports whether the member is running and is the raft leader.
func (m *EtcdMember) IsLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return false
	}
	s := m.e.Server
	return s.Leader() != 0 && s.Leader() == s.MemberID()
}

// Endpoint returns the member's client address (host:port).
func (m *EtcdMember) Endpoint() string { return strings.TrimPrefix(m.ClientURL, "http://") }

// Stop stops the member gracefully (a leader hands leadership over first).
func (m *EtcdMember) Stop() error {
	m.mu.Lock()
	e := m.e
	m.e = nil
	m.mu.Unlock()
	if e == nil {
		return nil
	}
	e.Close()
	return nil
}

// Kill stops the member the way a crash looks from outside: raft stops at
// once (no leadership transfer, no goodbye to peers) and client
// connections are cut without draining.
func (m *EtcdMember) Kill() error {
	m.mu.Lock()
	e := m.e
	m.e = nil
	m.mu.Unlock()
	if e == nil {
		return nil
	}
	e.Server.HardStop()
	// Cut client connections at once: Close would wait for open streams
	// (watches) to finish for up to the request timeout.
	for _, l := range e.Clients {
		_ = l.Close()
	}
	done := make(chan struct{})
	go func() { e.Close(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("testserver: etcd member %s did not stop", m.Name)
	}
}

// Restart starts a stopped or killed member again with its data dir and
// ports (it rejoins the cluster with its data).
func (m *EtcdMember) Restart(ctx context.Context) error {
	if err := m.Kill(); err != nil {
		return err
	}
	m.mu.Lock()
	m.cfg.ClusterState = embed.ClusterStateFlagExisting
	m.mu.Unlock()
	return m.start(ctx)
}

package testserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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

// etcdMemberEnv carries a member's spec to a re-executed binary (see init).
const etcdMemberEnv = "FENCELOCK_ETCD_MEMBER"

// If this process was started as an etcd member (by EtcdCluster), run the
// member and exit: the member is the running binary itself (the test
// binary, usually), embedding etcd via go.etcd.io/etcd/server/v3/embed, so
// no etcd binary is needed and Kill, Pause and Resume are real signals.
func init() {
	if v := os.Getenv(etcdMemberEnv); v != "" {
		os.Exit(runEtcdMemberChild(v))
	}
}

// etcdMemberSpec is one member's configuration.
type etcdMemberSpec struct {
	Name, Dir, ClientURL, PeerURL, InitialCluster, State string
	// NoFsync skips fsync (etcd --unsafe-no-fsync): benchmarks of the
	// protocol without the disk. Set by ETCD_UNSAFE_NO_FSYNC=true.
	NoFsync bool
}

func (s etcdMemberSpec) config(lg *zap.Logger) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = s.Name
	cfg.Dir = s.Dir
	cu, _ := url.Parse(s.ClientURL)
	pu, _ := url.Parse(s.PeerURL)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = s.InitialCluster
	cfg.InitialClusterToken = "fencelock-test"
	cfg.ClusterState = s.State
	cfg.TickMs, cfg.ElectionMs = etcdTickMs, etcdElectionMs
	cfg.UnsafeNoFsync = s.NoFsync
	cfg.Logger, cfg.LogLevel = "zap", "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	return cfg
}

// startEmbedded starts a member in this process and waits until it serves
// clients (which needs a cluster quorum).
func startEmbedded(ctx context.Context, s etcdMemberSpec, lg *zap.Logger) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(s.config(lg))
	if err != nil {
		return nil, fmt.Errorf("start etcd member %s: %w", s.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd member %s failed during start: %w", s.Name, err)
	case <-ctx.Done():
		e.Server.HardStop()
		e.Close()
		return nil, fmt.Errorf("etcd member %s not ready: %w", s.Name, ctx.Err())
	}
}

// runEtcdMemberChild runs a member until SIGTERM/SIGINT (graceful stop) or
// SIGKILL. It marks readiness by creating <dir>.ready.
func runEtcdMemberChild(v string) int {
	var s etcdMemberSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Fprintln(os.Stderr, "etcd member: bad spec:", err)
		return 2
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	lg, err := zap.NewProductionConfig().Build() // JSON errors on stderr, captured by Proc
	if err != nil {
		lg = zap.NewNop()
	}
	lg = lg.WithOptions(zap.IncreaseLevel(zap.ErrorLevel))
	e, err := startEmbedded(context.Background(), s, lg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile(s.Dir+".ready", nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {
	case <-sig:
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd member:", err)
	}
	e.Close()
	return 0
}

// EtcdCluster is an etcd cluster (1 or more members) on free 127.0.0.1
// ports with data in temp dirs, each member a child process (see init), or
// an external server named by ETCD_URL (then Members is empty and the
// fault controls are unavailable).
type EtcdCluster struct {
	// Members are the members, in start order.
	Members []*EtcdMember
	// External is set when ETCD_URL named an existing server.
	External bool

	endpoints []string
}

// EtcdMember is one member: a real process with Stop (graceful: SIGTERM,
// a leader hands over first), Kill (SIGKILL, a crash), Pause and Resume
// (SIGSTOP/SIGCONT, a frozen VM) and Start (again, with its data dir).
type EtcdMember struct {
	*Proc
	Name      string
	ClientURL string // http://127.0.0.1:port
	PeerURL   string

	mu   sync.Mutex
	spec etcdMemberSpec
}

// StartEtcd starts a single-member etcd for tb and stops it at cleanup. If
// ETCD_URL is set (etcd://h1:2379,h2:2379 or a comma-separated list of
// host:port), that server is used instead.
func StartEtcd(tb testing.TB) *EtcdCluster { return StartEtcdCluster(tb, 1) }

// StartEtcdCluster starts an n-member etcd cluster for tb and stops it at
// cleanup. ETCD_URL overrides it, as for StartEtcd.
func StartEtcdCluster(tb testing.TB, n int) *EtcdCluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := NewEtcdCluster(ctx, n, tb.TempDir())
	if err != nil {
		Unavailable(tb, "etcd", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// NewEtcdCluster starts an n-member etcd cluster with data under dir,
// without package testing (for servers shared by a package's tests, started
// and stopped in TestMain); the caller calls Close. ETCD_URL overrides it,
// as for StartEtcd.
func NewEtcdCluster(ctx context.Context, n int, dir string) (*EtcdCluster, error) {
	if v := os.Getenv("ETCD_URL"); v != "" {
		eps, err := etcdEndpointsFromURL(v)
		if err != nil {
			return nil, fmt.Errorf("testserver: ETCD_URL: %w", err)
		}
		return &EtcdCluster{External: true, endpoints: eps}, nil
	}
	if n < 1 {
		return nil, fmt.Errorf("testserver: etcd cluster of %d members", n)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// A port can be taken between FreePort and the member's listen: retry.
	var lastErr error
	for attempt := range 3 {
		c, err := startEtcdProcs(ctx, exe, n, filepath.Join(dir, fmt.Sprintf("etcd%d", attempt)))
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

// StartEmbeddedEtcd starts a single-member etcd with its data in dir (which
// must exist), on a free 127.0.0.1 port. It needs no etcd binary: the
// member is this binary itself, re-executed as a child process that
// embeds etcd (see init), so the caller's process holds none of the
// server's goroutines and the member dies with it. Its logs are kept, not
// printed. It returns the member's etcd:// URL and a stop function. The
// fencelock CLI uses it as its zero-setup default store.
func StartEmbeddedEtcd(ctx context.Context, dir string) (url string, stop func() error, err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	c, err := startEtcdProcs(ctx, exe, 1, dir)
	if err != nil {
		return "", nil, err
	}
	return c.URL(""), c.Members[0].Kill, nil
}

func etcdSpecs(n int, dir string) ([]etcdMemberSpec, error) {
	var specs []etcdMemberSpec
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
		s := etcdMemberSpec{
			Name:      fmt.Sprintf("m%d", i),
			Dir:       filepath.Join(dir, fmt.Sprintf("m%d", i)),
			ClientURL: "http://" + Addr(cp),
			PeerURL:   "http://" + Addr(pp),
			State:     embed.ClusterStateFlagNew,
			NoFsync:   os.Getenv("ETCD_UNSAFE_NO_FSYNC") == "true",
		}
		specs = append(specs, s)
		initial = append(initial, s.Name+"="+s.PeerURL)
	}
	for i := range specs {
		specs[i].InitialCluster = strings.Join(initial, ",")
	}
	return specs, nil
}

func startEtcdProcs(ctx context.Context, exe string, n int, dir string) (*EtcdCluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	specs, err := etcdSpecs(n, dir)
	if err != nil {
		return nil, err
	}
	c := &EtcdCluster{}
	for _, s := range specs {
		m := &EtcdMember{Name: s.Name, ClientURL: s.ClientURL, PeerURL: s.PeerURL, spec: s}
		m.Proc = &Proc{Name: "etcd member " + s.Name + " " + s.ClientURL, Path: exe, Dir: dir}
		m.Proc.Ready = func(context.Context) error {
			if _, err := os.Stat(s.Dir + ".ready"); err != nil {
				return errors.New("not ready yet")
			}
			return nil
		}
		c.Members = append(c.Members, m)
		c.endpoints = append(c.endpoints, m.Endpoint())
	}
	// Members of a new cluster need each other to become ready: start them
	// together.
	errs := make(chan error, n)
	for _, m := range c.Members {
		go func() { errs <- m.Start(ctx) }()
	}
	for range n {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	for _, m := range c.Members { // a later start rejoins with its data
		m.mu.Lock()
		m.spec.State = embed.ClusterStateFlagExisting
		m.mu.Unlock()
	}
	return c, nil
}

// Start starts the member's process (again) and waits until it serves
// clients, which needs a quorum of the cluster to be up.
func (m *EtcdMember) Start(ctx context.Context) error {
	m.mu.Lock()
	spec, _ := json.Marshal(m.spec)
	_ = os.Remove(m.spec.Dir + ".ready")
	m.Proc.Env = []string{etcdMemberEnv + "=" + string(spec)}
	m.mu.Unlock()
	return m.Proc.Start(ctx)
}

// Restart stops the member gracefully and starts it again.
func (m *EtcdMember) Restart(ctx context.Context) error {
	if err := m.Stop(); err != nil {
		return err
	}
	return m.Start(ctx)
}

// Endpoint returns the member's client address (host:port).
func (m *EtcdMember) Endpoint() string { return strings.TrimPrefix(m.ClientURL, "http://") }

// Running reports whether the member's process is running.
func (m *EtcdMember) Running() bool { return m.PID() != 0 }

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
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		for _, m := range c.Members {
			if !m.Running() {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			st, err := cli.Status(sctx, m.Endpoint())
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
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

// Close kills every member (tests need no graceful stop).
func (c *EtcdCluster) Close() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Go(func() { _ = m.Kill() })
	}
	wg.Wait()
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

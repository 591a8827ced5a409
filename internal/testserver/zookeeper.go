package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ZooKeeper is a ZooKeeper standalone server or ensemble: child processes
// started by StartZooKeeper, StartZooKeeperProcess or
// StartZooKeeperEnsemble, or an existing service named by ZK_URL (then
// Nodes is empty and there are no fault controls).
//
// The servers are Debian's zookeeper package (3.8, java QuorumPeerMain) on
// free 127.0.0.1 ports, with fsync on (ZooKeeper's default), the admin
// server off, the srvr and ruok four-letter words on, no per-IP connection
// limit, tickTime 200ms, minSessionTimeout 1s, maxSessionTimeout 60s and
// empty containers deleted every 500ms.
type ZooKeeper struct {
	// Nodes are the servers, in myid order (one for a standalone server).
	Nodes []*ZKNode
	// Dir holds one directory per node.
	Dir string

	url string
}

// ZKNode is one ZooKeeper server process.
type ZKNode struct {
	// Proc is the JVM (Kill, Pause, Resume, Restart, ...).
	Proc *Proc
	// ID is the server's myid (1-based).
	ID int
	// Port is the client port on 127.0.0.1.
	Port int
	// Dir is the node's directory (zoo.cfg, data/).
	Dir string
}

// Addr returns the node's client address, 127.0.0.1:PORT.
func (n *ZKNode) Addr() string { return Addr(n.Port) }

// ZooKeeperURLEnv names the environment variable that points
// StartZooKeeper at an existing service instead of starting one, e.g.
// zk://127.0.0.1:2181/fencelock-test.
const ZooKeeperURLEnv = "ZK_URL"

// ZooKeeperJar is the server jar of Debian's zookeeper package.
const ZooKeeperJar = "/usr/share/java/zookeeper.jar"

// ZooKeeper timing of the test servers.
const (
	ZKTickTime          = 200 * time.Millisecond
	ZKMinSessionTimeout = time.Second
	ZKMaxSessionTimeout = 60 * time.Second
	// ZKContainerCheck is how often the servers delete empty container
	// nodes (ZooKeeper's default is 60s).
	ZKContainerCheck = 500 * time.Millisecond
)

// URL returns a zk:// URL for the service: every node's client address and
// the root path /fencelock-test, or ZK_URL.
func (z *ZooKeeper) URL() string { return z.url }

// Servers returns the nodes' client addresses (nil for an existing service).
func (z *ZooKeeper) Servers() []string {
	s := make([]string, len(z.Nodes))
	for i, n := range z.Nodes {
		s[i] = n.Addr()
	}
	return s
}

// Leader returns the node that is the ensemble's leader now (the only node
// of a standalone server), asking each with the srvr four-letter word.
func (z *ZooKeeper) Leader(ctx context.Context) (*ZKNode, error) {
	if len(z.Nodes) == 1 {
		return z.Nodes[0], nil
	}
	for _, n := range z.Nodes {
		if n.Proc.PID() == 0 {
			continue
		}
		if mode, err := ZKMode(ctx, n.Addr()); err == nil && mode == "leader" {
			return n, nil
		}
	}
	return nil, errors.New("testserver: no ZooKeeper node says it is the leader")
}

// WaitServing waits until every running node serves requests (its srvr
// reply has a Mode: standalone, leader or follower).
func (z *ZooKeeper) WaitServing(ctx context.Context) error {
	for _, n := range z.Nodes {
		if n.Proc.PID() == 0 {
			continue
		}
		for {
			_, err := ZKMode(ctx, n.Addr())
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("testserver: ZooKeeper %s not serving: %w (last: %v)", n.Addr(), ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// ZKMode asks the server at addr for its mode with the srvr four-letter
// word: "standalone", "leader" or "follower"; an error if it does not
// serve requests.
func ZKMode(ctx context.Context, addr string) (string, error) {
	out, err := zkFourLetter(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(out, "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode:"); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("testserver: ZooKeeper %s not serving: %q", addr, strings.TrimSpace(out))
}

func zkFourLetter(ctx context.Context, addr, cmd string) (string, error) {
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// StartZooKeeper returns a running ZooKeeper for tb: the service named by
// ZK_URL if set, else a standalone child process (StartZooKeeperProcess).
func StartZooKeeper(tb testing.TB) *ZooKeeper {
	tb.Helper()
	if u := os.Getenv(ZooKeeperURLEnv); u != "" {
		return &ZooKeeper{url: u}
	}
	return StartZooKeeperProcess(tb)
}

// StartZooKeeperProcess starts a standalone ZooKeeper child process for tb,
// killed when tb ends. A missing java or zookeeper.jar skips tb (fails it
// under CI=true).
func StartZooKeeperProcess(tb testing.TB) *ZooKeeper {
	tb.Helper()
	return startZKForTest(tb, 1)
}

// StartZooKeeperEnsemble starts an ensemble of n nodes (3 for a quorum that
// survives one failure) for tb, killed when tb ends.
func StartZooKeeperEnsemble(tb testing.TB, n int) *ZooKeeper {
	tb.Helper()
	return startZKForTest(tb, n)
}

func startZKForTest(tb testing.TB, n int) *ZooKeeper {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	z, err := NewZooKeeper(ctx, n)
	if errors.Is(err, ErrMissing) {
		Unavailable(tb, "ZooKeeper", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(z.Cleanup)
	return z
}

// NewZooKeeper starts n ZooKeeper nodes (1: standalone) without package
// testing (the CLI's compare command) in a new temp dir. The caller calls
// Cleanup. An error wrapping ErrMissing means java or the zookeeper package
// is missing.
func NewZooKeeper(ctx context.Context, n int) (*ZooKeeper, error) {
	return newZooKeeper(ctx, n, false)
}

// NewStockZooKeeper starts a standalone ZooKeeper with the timing a user's
// server has out of the box: tickTime 2000 ms and ZooKeeper's default
// session bounds (minSessionTimeout 2 ticks = 4 s, maxSessionTimeout 20
// ticks) and container check interval; only the admin server is off, the
// srvr and ruok four-letter words are on (readiness) and the per-IP
// connection limit is lifted (the suite opens many clients from
// 127.0.0.1). The caller calls Cleanup.
func NewStockZooKeeper(ctx context.Context) (*ZooKeeper, error) {
	return newZooKeeper(ctx, 1, true)
}

// StartStockZooKeeper is NewStockZooKeeper for a test, stopped at its end.
func StartStockZooKeeper(tb testing.TB) *ZooKeeper {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	z, err := NewStockZooKeeper(ctx)
	if errors.Is(err, ErrMissing) {
		Unavailable(tb, "ZooKeeper", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(z.Cleanup)
	return z
}

func newZooKeeper(ctx context.Context, n int, stock bool) (*ZooKeeper, error) {
	if n < 1 {
		return nil, fmt.Errorf("testserver: ZooKeeper with %d nodes", n)
	}
	java, err := LookPath("java", "/usr/bin/java")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		return nil, fmt.Errorf("%w: %s (Debian package zookeeper)", ErrMissing, ZooKeeperJar)
	}
	dir, err := os.MkdirTemp("", "fencelock-zk-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 { // a port taken meanwhile: try again with new ones
		z, err := startZK(ctx, java, dir, n, stock)
		if err == nil {
			return z, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// Cleanup kills the nodes and removes their directories; nothing for an
// existing service.
func (z *ZooKeeper) Cleanup() {
	for _, n := range z.Nodes {
		_ = n.Proc.Kill()
	}
	if z.Dir != "" {
		_ = os.RemoveAll(z.Dir)
	}
}

func startZK(ctx context.Context, java, dir string, n int, stock bool) (*ZooKeeper, error) {
	type ports struct{ client, peer, election int }
	ps := make([]ports, n)
	for i := range ps {
		var err error
		for _, p := range []*int{&ps[i].client, &ps[i].peer, &ps[i].election} {
			if *p, err = FreePort(); err != nil {
				return nil, err
			}
		}
	}
	z := &ZooKeeper{Dir: dir}
	for i := range n {
		nd := filepath.Join(dir, "node"+strconv.Itoa(i+1))
		data := filepath.Join(nd, "data")
		_ = os.RemoveAll(nd)
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, err
		}
		var cfg strings.Builder
		tick := ZKTickTime
		if stock {
			tick = 2 * time.Second
		}
		fmt.Fprintf(&cfg, "tickTime=%d\ninitLimit=10\nsyncLimit=5\n", tick.Milliseconds())
		fmt.Fprintf(&cfg, "dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n", data, ps[i].client)
		if !stock {
			fmt.Fprintf(&cfg, "minSessionTimeout=%d\nmaxSessionTimeout=%d\n", ZKMinSessionTimeout.Milliseconds(), ZKMaxSessionTimeout.Milliseconds())
		}
		cfg.WriteString("maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\npreAllocSize=4096\n")
		if n > 1 {
			for j, p := range ps {
				fmt.Fprintf(&cfg, "server.%d=127.0.0.1:%d:%d\n", j+1, p.peer, p.election)
			}
			if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
				return nil, err
			}
		}
		cfgPath := filepath.Join(nd, "zoo.cfg")
		if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
			return nil, err
		}
		addr := Addr(ps[i].client)
		z.Nodes = append(z.Nodes, &ZKNode{ID: i + 1, Port: ps[i].client, Dir: nd, Proc: &Proc{
			Name: "zookeeper " + addr,
			Path: java,
			Args: []string{
				"-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
				"-Dzookeeper.admin.enableServer=false",
				containerCheck(stock),
				"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
				"-cp", ZooKeeperJar + ":/usr/share/java/slf4j-simple.jar",
				"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath,
			},
			Dir: nd,
			Ready: func(ctx context.Context) error {
				_, err := ZKMode(ctx, addr)
				return err
			},
		}})
	}
	// Ensemble nodes become ready only together: start them at once.
	errs := make([]error, n)
	var wg sync.WaitGroup
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for i, nd := range z.Nodes {
		wg.Go(func() { errs[i] = nd.Proc.Start(sctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, nd := range z.Nodes {
			_ = nd.Proc.Kill()
		}
		return nil, err
	}
	z.url = "zk://" + strings.Join(z.Servers(), ",") + "/fencelock-test"
	return z, nil
}

// containerCheck is the JVM flag that sets how often empty containers are
// deleted: ZKContainerCheck for test servers, ZooKeeper's default (60 s)
// for a stock one.
func containerCheck(stock bool) string {
	ms := ZKContainerCheck.Milliseconds()
	if stock {
		ms = 60_000
	}
	return "-Dznode.container.checkIntervalMs=" + strconv.Itoa(int(ms))
}

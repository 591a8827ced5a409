package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RedisNodesOptions configures StartRedisNodes and NewRedisNodes. The zero
// value gives nodes without persistence.
type RedisNodesOptions struct {
	// AppendOnly runs every node with appendonly yes and appendfsync
	// always: a node killed and restarted with Restart keeps every write it
	// acknowledged. Without it a restart (of any kind) comes back empty.
	AppendOnly bool
}

// RedisNodes is N independent redis-server processes (no replication, no
// cluster): the primaries of a Redlock deployment.
type RedisNodes struct {
	// Nodes are the servers, in URL order.
	Nodes []*Redis

	appendOnly bool
}

// StartRedisNodes starts n independent redis-server processes on free
// 127.0.0.1 ports, each in its own temp dir, and kills them when tb ends.
// opts may be nil. A missing redis-server binary skips tb (fails it under
// CI=true).
func StartRedisNodes(tb testing.TB, n int, opts *RedisNodesOptions) *RedisNodes {
	tb.Helper()
	bin, err := LookPath("redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	if err != nil {
		Unavailable(tb, "redis-server", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = tb.TempDir()
	}
	m, err := startRedisNodes(ctx, bin, dirs, opts)
	if m != nil {
		tb.Cleanup(m.killAll)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// NewRedisNodes starts n independent redis-server processes outside of a
// test (for the CLI's compare command), each in a new temp dir. The caller
// calls cleanup, which kills them and removes the dirs.
func NewRedisNodes(ctx context.Context, n int, opts *RedisNodesOptions) (m *RedisNodes, cleanup func(), err error) {
	bin, err := LookPath("redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	if err != nil {
		return nil, nil, err
	}
	root, err := os.MkdirTemp("", "fencelock-redlock-")
	if err != nil {
		return nil, nil, err
	}
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = filepath.Join(root, fmt.Sprint(i))
		if err := os.Mkdir(dirs[i], 0o755); err != nil {
			os.RemoveAll(root)
			return nil, nil, err
		}
	}
	m, err = startRedisNodes(ctx, bin, dirs, opts)
	cleanup = func() {
		if m != nil {
			m.killAll()
		}
		os.RemoveAll(root)
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return m, cleanup, nil
}

func startRedisNodes(ctx context.Context, bin string, dirs []string, opts *RedisNodesOptions) (*RedisNodes, error) {
	if len(dirs) < 1 {
		return nil, errors.New("testserver: StartRedisNodes needs at least one node")
	}
	var o RedisNodesOptions
	if opts != nil {
		o = *opts
	}
	var extra []string
	if o.AppendOnly {
		// After startRedisNode's own "--appendonly no": the last one wins.
		extra = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	m := &RedisNodes{appendOnly: o.AppendOnly}
	for _, dir := range dirs {
		r, err := startRedisNode(ctx, bin, dir, false, extra...)
		if err != nil {
			return m, err
		}
		m.Nodes = append(m.Nodes, r)
	}
	return m, nil
}

func (m *RedisNodes) killAll() {
	for _, n := range m.Nodes {
		_ = n.Proc.Kill()
	}
}

// Addrs returns the nodes' 127.0.0.1:PORT addresses, in order.
func (m *RedisNodes) Addrs() []string {
	a := make([]string, len(m.Nodes))
	for i, n := range m.Nodes {
		a[i] = n.Addr()
	}
	return a
}

// URL returns redlock://ADDR1,ADDR2,... listing every node.
func (m *RedisNodes) URL() string { return "redlock://" + strings.Join(m.Addrs(), ",") }

// Kill kills node i at once (SIGKILL, a crash). Start brings it back.
func (m *RedisNodes) Kill(i int) error { return m.Nodes[i].Proc.Kill() }

// Pause freezes node i (SIGSTOP): its connections stay open, nothing is
// answered.
func (m *RedisNodes) Pause(i int) error { return m.Nodes[i].Proc.Pause() }

// Resume continues a paused node i (SIGCONT).
func (m *RedisNodes) Resume(i int) error { return m.Nodes[i].Proc.Resume() }

// Start starts a killed node i again on its port and dir: with AppendOnly
// it reloads its data, else it comes back empty.
func (m *RedisNodes) Start(ctx context.Context, i int) error { return m.Nodes[i].Proc.Start(ctx) }

// Restart kills node i (a crash, not a clean shutdown) and starts it again
// on the same port and dir. With AppendOnly it comes back with every write
// it acknowledged (appendfsync always); without, empty.
func (m *RedisNodes) Restart(ctx context.Context, i int) error {
	if err := m.Kill(i); err != nil {
		return err
	}
	return m.Start(ctx, i)
}

// RestartEmpty kills node i, deletes its data files and starts it again on
// the same port: the node comes back with no keys whatever its persistence
// settings (a replaced machine, a lost disk).
func (m *RedisNodes) RestartEmpty(ctx context.Context, i int) error {
	if err := m.Kill(i); err != nil {
		return err
	}
	dir := m.Nodes[i].Dir
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return m.Start(ctx, i)
}

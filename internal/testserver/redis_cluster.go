package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisClusterOptions configures StartRedisCluster. The zero value is a
// 3-primary cluster without replicas.
type RedisClusterOptions struct {
	// Primaries is the number of primaries (default 3, the minimum for
	// failover: a majority of primaries must agree that one failed).
	Primaries int
	// Replicas is the number of replicas per primary (default 0).
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a node may be
	// unreachable before it is marked failed and its replica promoted
	// (default 1s).
	NodeTimeout time.Duration
}

// RedisCluster is a Redis Cluster of real redis-server processes created
// with `redis-cli --cluster create`, or an existing cluster named by
// REDIS_CLUSTER_URL (then Nodes is empty and there are no fault controls).
type RedisCluster struct {
	// Nodes are the cluster's servers: the first Primaries were created as
	// primaries, the rest as their replicas. Roles change on failover; use
	// MasterOf and ReplicasOf for the current ones.
	Nodes []*Redis

	url string
}

// RedisClusterURLEnv names the environment variable that points
// StartRedisCluster at an existing cluster
// (e.g. redis://127.0.0.1:7000,127.0.0.1:7001?cluster=true).
const RedisClusterURLEnv = "REDIS_CLUSTER_URL"

// URL returns a redis:// URL listing every node, with cluster=true.
func (c *RedisCluster) URL() string { return c.url }

// StartRedisCluster starts a Redis Cluster for tb (or returns the one named
// by REDIS_CLUSTER_URL), waits until it is healthy, and kills it when tb
// ends. Every node gets an explicit --cluster-port. A missing redis-server
// or redis-cli skips tb (fails it under CI=true). opts may be nil.
func StartRedisCluster(tb testing.TB, opts *RedisClusterOptions) *RedisCluster {
	tb.Helper()
	if u := os.Getenv(RedisClusterURLEnv); u != "" {
		return &RedisCluster{url: u}
	}
	var o RedisClusterOptions
	if opts != nil {
		o = *opts
	}
	if o.Primaries <= 0 {
		o.Primaries = 3
	}
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = time.Second
	}
	bin, err := LookPath("redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	if err != nil {
		Unavailable(tb, "redis-server", err)
	}
	cli, err := LookPath("redis-cli", "/usr/bin/redis-cli", "/usr/local/bin/redis-cli")
	if err != nil {
		Unavailable(tb, "redis-cli (Debian package redis-tools)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := &RedisCluster{}
	tb.Cleanup(func() {
		for _, n := range c.Nodes {
			_ = n.Proc.Kill()
		}
	})
	args := []string{
		"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10),
		// A replica may be promoted however long it was cut off: the fault
		// tests want a deterministic failover.
		"--cluster-replica-validity-factor", "0",
		"--cluster-allow-replica-migration", "no",
		// Slots of other primaries keep working while one is down.
		"--cluster-require-full-coverage", "no",
	}
	addrs := make([]string, 0, o.Primaries*(1+o.Replicas))
	for range o.Primaries * (1 + o.Replicas) {
		n, err := startRedisNode(ctx, bin, tb.TempDir(), true, args...)
		if err != nil {
			tb.Fatal(err)
		}
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr())
	}
	create := append([]string{"--cluster", "create"}, addrs...)
	create = append(create, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput()
	if err != nil {
		tb.Fatalf("testserver: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.url = "redis://" + strings.Join(addrs, ",") + "?cluster=true"
	if err := c.WaitHealthy(ctx); err != nil {
		tb.Fatalf("%v\nredis-cli output:\n%s", err, out)
	}
	return c
}

// running returns the nodes whose process runs and is not paused.
func (c *RedisCluster) running() []*Redis {
	var rs []*Redis
	for _, n := range c.Nodes {
		n.Proc.mu.Lock()
		up := n.Proc.cmd != nil && !n.Proc.paused
		n.Proc.mu.Unlock()
		if up {
			rs = append(rs, n)
		}
	}
	return rs
}

// WaitHealthy waits until every running node reports cluster_state:ok with
// all 16384 slots served, agrees on who serves them, and every running
// replica's link to its primary is up. It returns an error when ctx ends.
func (c *RedisCluster) WaitHealthy(ctx context.Context) error {
	var last error
	for {
		if last = c.healthy(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: redis cluster not healthy: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *RedisCluster) healthy(ctx context.Context) error {
	var view string
	for _, n := range c.running() {
		info, err := n.Do(ctx, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if st := InfoField(info, "cluster_state"); st != "ok" {
			return fmt.Errorf("%s: cluster_state %q", n.Addr(), st)
		}
		if ok := InfoField(info, "cluster_slots_ok"); ok != "16384" {
			return fmt.Errorf("%s: cluster_slots_ok %s", n.Addr(), ok)
		}
		nodes, err := c.nodes(ctx, n)
		if err != nil {
			return err
		}
		v := slotView(nodes)
		if view == "" {
			view = v
		} else if v != view {
			return fmt.Errorf("%s: slot owners differ: %s vs %s", n.Addr(), v, view)
		}
		repl, err := n.Do(ctx, "INFO", "replication")
		if err != nil {
			return err
		}
		if InfoField(repl, "role") == "slave" && InfoField(repl, "master_link_status") != "up" {
			return fmt.Errorf("%s: replica link %q", n.Addr(), InfoField(repl, "master_link_status"))
		}
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string
	flags            []string
	slots            [][2]int
}

func (n clusterNode) is(flag string) bool { return slices.Contains(n.flags, flag) }

func (c *RedisCluster) nodes(ctx context.Context, via *Redis) ([]clusterNode, error) {
	v, err := via.Do(ctx, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	s, _ := v.(string)
	var out []clusterNode
	for line := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := clusterNode{id: f[0], master: f[3], flags: strings.Split(f[2], ",")}
		n.addr, _, _ = strings.Cut(f[1], "@")
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated
			}
			lo, hi, found := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if found {
				b, _ = strconv.Atoi(hi)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out, nil
}

// slotView summarizes which address serves which slot ranges.
func slotView(nodes []clusterNode) string {
	var parts []string
	for _, n := range nodes {
		if n.is("master") && !n.is("fail") && len(n.slots) > 0 {
			parts = append(parts, fmt.Sprint(n.addr, n.slots))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func (c *RedisCluster) byAddr(addr string) *Redis {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// MasterOf returns the node currently serving key's hash slot, as seen by
// the first running node.
func (c *RedisCluster) MasterOf(ctx context.Context, key string) (*Redis, error) {
	via, nodes, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	v, err := via.Do(ctx, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return nil, err
	}
	slot, _ := v.(int64)
	for _, n := range nodes {
		if !n.is("master") || n.is("fail") {
			continue
		}
		for _, r := range n.slots {
			if int(slot) >= r[0] && int(slot) <= r[1] {
				if m := c.byAddr(n.addr); m != nil {
					return m, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("testserver: no running primary serves slot %d of %q", slot, key)
}

// ReplicasOf returns the nodes currently replicating master.
func (c *RedisCluster) ReplicasOf(ctx context.Context, master *Redis) ([]*Redis, error) {
	_, nodes, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	var id string
	for _, n := range nodes {
		if n.addr == master.Addr() {
			id = n.id
		}
	}
	var rs []*Redis
	for _, n := range nodes {
		if id != "" && n.master == id && n.is("slave") {
			if r := c.byAddr(n.addr); r != nil {
				rs = append(rs, r)
			}
		}
	}
	return rs, nil
}

func (c *RedisCluster) view(ctx context.Context) (*Redis, []clusterNode, error) {
	run := c.running()
	if len(run) == 0 {
		return nil, nil, fmt.Errorf("testserver: no running cluster node")
	}
	nodes, err := c.nodes(ctx, run[0])
	return run[0], nodes, err
}

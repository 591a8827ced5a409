package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fencelock/fencelock/internal/testserver"
)

// target is one store compare measures.
type target struct {
	label   string
	url     string
	server  string // what runs it, and how it is configured
	maxHeld int    // most leases the cost table holds on it (0: no cap)
	// heldParams are URL parameters for the cost table's Client.
	heldParams string
}

// compareBackends are the backends `fencelock compare` measures, in
// document order, with the URL schemes each covers (a test checks that
// every scheme the CLI registers is covered) and how compare starts its
// server: configured as users run it (fsync on, a stock etcd with its
// default timing), never tuned for tests.
var compareBackends = []struct {
	label   string
	schemes []string
	needs   string // infrastructure it needs in production
	maxHeld int    // most leases the cost table holds on it (0: no cap)
	// heldParams are URL parameters for the cost table's Client.
	heldParams string
	start      func(ctx context.Context, dir string) (url, server string, stop func(), err error)
}{
	{"mem", []string{"mem", "memrpc"}, "nothing (one process)", 0, "", func(context.Context, string) (string, string, func(), error) {
		return "mem://compare", "in process", func() {}, nil
	}},
	{"redis", []string{"redis", "rediss"}, "one Redis (or a Redis Cluster); fences ride on its persistence", 0, "", func(ctx context.Context, _ string) (string, string, func(), error) {
		r, stop, err := testserver.NewRedis(ctx)
		if err != nil {
			return "", "", nil, err
		}
		return r.URL(), "redis-server " + version("redis-server", "--version", "v=") + ", default configuration", stop, nil
	}},
	{"redlock", []string{"redlock"}, "N independent Redis primaries (5 is usual), no replication between them", 0, "", func(ctx context.Context, _ string) (string, string, func(), error) {
		m, stop, err := testserver.NewRedisNodes(ctx, 5, nil)
		if err != nil {
			return "", "", nil, err
		}
		return m.URL(), "5 × redis-server " + version("redis-server", "--version", "v=") + ", independent primaries", stop, nil
	}},
	{"etcd", []string{"etcd"}, "an etcd cluster (3 or 5 members for availability)", 0, "", func(ctx context.Context, dir string) (string, string, func(), error) {
		e, err := testserver.NewStockEtcd(ctx, filepath.Join(dir, "etcd"))
		if err != nil {
			return "", "", nil, err
		}
		return e.URL(""), "etcd " + version("etcd", "--version", "etcd Version: ") + " (Debian), default timing, fsync on, 1 member", func() { _ = e.Kill() }, nil
	}},
	{"zookeeper", []string{"zk"}, "a ZooKeeper ensemble (3 or 5)", 0, "", func(ctx context.Context, _ string) (string, string, func(), error) {
		z, err := testserver.NewStockZooKeeper(ctx)
		if err != nil {
			return "", "", nil, err
		}
		return z.URL(), "ZooKeeper " + zkVersion() + " (Debian), standalone, stock timing (tickTime 2 s, so sessions of 4–40 s), fsync on", z.Cleanup, nil
	}},
	{"pgadvisory", []string{"postgres", "postgresql"}, "one PostgreSQL primary; a pool connection per held lease and per waiter", 100, "pool_max_conns=110", func(ctx context.Context, _ string) (string, string, func(), error) {
		p, err := testserver.NewPostgres(ctx, "-c", "fsync=on", "-c", "full_page_writes=on", "-c", "synchronous_commit=on")
		if err != nil {
			return "", "", nil, err
		}
		return p.URL(), "PostgreSQL " + version(filepath.Join(testserver.PostgresBinDir, "postgres"), "--version", "(PostgreSQL) ") + ", fsync on, synchronous_commit on", p.Cleanup, nil
	}},
	{"dynamodb", []string{"dynamodb"}, "a DynamoDB table (no server of your own)", 300, "", func(ctx context.Context, _ string) (string, string, func(), error) {
		d, stop, err := testserver.NewDynalite(ctx)
		if err != nil {
			return "", "", nil, err
		}
		return d.URL(), "dynalite 4.0.0 (in-memory DynamoDB emulator; latency is not AWS's)", stop, nil
	}},
}

// compareTargets returns the stores to compare, starting every backend's
// server when no URL is given. A server that cannot start leaves its
// backend's rows saying so.
func compareTargets(ctx context.Context, urls []string) ([]target, func(), error) {
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	if len(urls) > 0 {
		var ts []target
		for _, u := range urls {
			scheme, _, _ := strings.Cut(u, ":")
			ts = append(ts, target{label: scheme, url: u, server: "given by --url"})
		}
		return ts, cleanup, nil
	}
	dir, err := os.MkdirTemp("", "fencelock-compare-")
	if err != nil {
		return nil, cleanup, err
	}
	cleanups = append(cleanups, func() { os.RemoveAll(dir) })
	var ts []target
	for _, b := range compareBackends {
		url, server, stop, err := b.start(ctx, dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "compare: %s: cannot start its server: %v (%s)\n", b.label, err, testserver.InstallHint)
			ts = append(ts, target{label: b.label, server: fmt.Sprintf("not started: %v", err)})
			continue
		}
		cleanups = append(cleanups, stop)
		ts = append(ts, target{label: b.label, url: url, server: server, maxHeld: b.maxHeld, heldParams: b.heldParams})
	}
	return ts, cleanup, nil
}

// version runs bin arg and returns the word after marker in its output,
// or "(version unknown)".
func version(bin, arg, marker string) string {
	out, err := exec.Command(bin, arg).CombinedOutput()
	if err != nil {
		return "(version unknown)"
	}
	_, after, ok := strings.Cut(string(out), marker)
	if !ok {
		return "(version unknown)"
	}
	return strings.Fields(after + " ")[0]
}

func zkVersion() string {
	m, _ := filepath.Glob("/usr/share/java/zookeeper-*.jar")
	if len(m) == 0 {
		return "(version unknown)"
	}
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "zookeeper-"), ".jar")
}

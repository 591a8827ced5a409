// Package redlock compares fencelock's Redlock backend with redsync, the
// usual Go Redlock library, on the same real primaries: interop (a lock
// taken by one excludes the other, both ways) and side-by-side benchmarks.
// It lives in the nested bench module so that the library's go.mod never
// requires redsync.
package redlock

import (
	"context"
	"testing"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	_ "github.com/fencelock/fencelock/backends/redlock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// primaries starts n independent redis-server processes for tb.
func primaries(tb testing.TB, n int, opts *testserver.RedisNodesOptions) *testserver.RedisNodes {
	tb.Helper()
	return testserver.StartRedisNodes(tb, n, opts)
}

// openFencelock opens a fencelock Redlock client on m by URL, with
// defaults, closed when tb ends.
func openFencelock(tb testing.TB, m *testserver.RedisNodes) *fencelock.Client {
	tb.Helper()
	c, err := fencelock.Open(context.Background(), m.URL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// newRedsync makes a redsync over m's primaries with go-redis v9 clients
// of their own (defaults), closed when tb ends.
func newRedsync(tb testing.TB, m *testserver.RedisNodes) *redsync.Redsync {
	tb.Helper()
	var pools []rsredis.Pool
	for _, a := range m.Addrs() {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		tb.Cleanup(func() { _ = c.Close() })
		pools = append(pools, rsgoredis.NewPool(c))
	}
	return redsync.New(pools...)
}

package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redis"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// The benchmarks compare fencelock with the unfenced lock most Redis
// libraries implement, done directly with go-redis on the same server and
// connection pool:
//
//	go test -run XXX -bench . -benchtime 5s ./backends/redis/

// plainRelease is the usual unfenced compare-and-delete (redsync, redis-py).
var plainRelease = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// plainCycle is one unfenced SET NX PX + compare-and-delete.
func plainCycle(ctx context.Context, b *testing.B, rc goredis.UniversalClient, key string) {
	var buf [16]byte
	_, _ = rand.Read(buf[:])
	tok := hex.EncodeToString(buf[:])
	if ok, err := rc.SetNX(ctx, key, tok, 30*time.Second).Result(); err != nil || !ok {
		b.Fatalf("SET NX: %v %v", ok, err)
	}
	if n, err := plainRelease.Run(ctx, rc, []string{key}, tok).Int64(); err != nil || n != 1 {
		b.Fatalf("compare-and-delete: %v %v", n, err)
	}
}

var noRenew = &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)}

// fencedCycle is one TryAcquire + Release through the portable Client.
func fencedCycle(ctx context.Context, b *testing.B, c *fencelock.Client, name string) {
	l, err := c.TryAcquire(ctx, name, noRenew)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		b.Fatal(err)
	}
}

// driverCycle is the same through the bare driver: the fence's own cost,
// without the portable layer's.
func driverCycle(ctx context.Context, b *testing.B, d driver.Backend, name string) {
	var buf [16]byte
	_, _ = rand.Read(buf[:])
	l, err := d.TryAcquire(ctx, driver.AcquireRequest{Name: name, Token: hex.EncodeToString(buf[:]), TTL: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		b.Fatal(err)
	}
}

func benchSetup(b *testing.B) (*fencelock.Client, goredis.UniversalClient, driver.Backend) {
	r := testserver.StartRedis(b)
	c := open(b, r.URL(), nil, nil)
	rc := native(b, c)
	d := redis.NewDriver(rc)
	b.Cleanup(func() { _ = d.Close() })
	return c, rc, d
}

// BenchmarkAcquireRelease: uncontended acquire+release, fenced through
// fencelock and plain through go-redis, in the same run.
func BenchmarkAcquireRelease(b *testing.B) {
	c, rc, _ := benchSetup(b)
	ctx := b.Context()
	b.Run("fenced", func(b *testing.B) {
		for b.Loop() {
			fencedCycle(ctx, b, c, "bench-fenced")
		}
	})
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			plainCycle(ctx, b, rc, "bench-plain")
		}
	})
}

// BenchmarkFenceOverhead interleaves plain, fenced driver and fenced Client
// cycles in blocks, so that drift in machine load hits all alike, and
// reports the overheads over plain: in wall time, and in CPU time (this
// process plus the server, from INFO cpu), which a loaded or virtualized
// machine distorts far less.
func BenchmarkFenceOverhead(b *testing.B) {
	c, rc, d := benchSetup(b)
	ctx := b.Context()
	const block = 50
	type acc struct{ wall, cpu time.Duration }
	var plain, drv, fenced acc
	measure := func(a *acc, f func()) {
		s0, c0, t0 := serverCPU(ctx, b, rc), testhelp.ProcessCPU(), time.Now()
		for range block {
			f()
		}
		a.wall += time.Since(t0)
		a.cpu += testhelp.ProcessCPU() - c0
		a.cpu += serverCPU(ctx, b, rc) - s0
	}
	for b.Loop() {
		measure(&plain, func() { plainCycle(ctx, b, rc, "bench-plain") })
		measure(&drv, func() { driverCycle(ctx, b, d, "bench-driver") })
		measure(&fenced, func() { fencedCycle(ctx, b, c, "bench-fenced") })
	}
	n := float64(b.N * block)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / n / 1000 }
	pct := func(x, base time.Duration) float64 { return 100 * (float64(x)/float64(base) - 1) }
	b.ReportMetric(us(plain.wall), "plain-µs/op")
	b.ReportMetric(us(fenced.wall), "fenced-µs/op")
	b.ReportMetric(pct(drv.wall, plain.wall), "driver-wall-overhead-%")
	b.ReportMetric(pct(fenced.wall, plain.wall), "client-wall-overhead-%")
	b.ReportMetric(pct(drv.cpu, plain.cpu), "driver-cpu-overhead-%")
	b.ReportMetric(pct(fenced.cpu, plain.cpu), "client-cpu-overhead-%")
	b.ReportMetric(0, "ns/op")
}

func serverCPU(ctx context.Context, b *testing.B, rc goredis.UniversalClient) time.Duration {
	info, err := rc.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	u, _ := strconv.ParseFloat(testserver.InfoField(info, "used_cpu_user"), 64)
	s, _ := strconv.ParseFloat(testserver.InfoField(info, "used_cpu_sys"), 64)
	return time.Duration((u + s) * 1e9)
}

// BenchmarkHandOff: from the holder's Release call to the blocked
// Acquire's return, on two clients; median and p99.
func BenchmarkHandOff(b *testing.B) {
	r := testserver.StartRedis(b)
	ctx := b.Context()
	a, w := open(b, r.URL(), nil, nil), open(b, r.URL(), nil, nil)
	var all []time.Duration
	for b.Loop() {
		lat, err := conformance.HandOffLatencies(ctx, a, w, "bench-handoff", 1)
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, lat...)
	}
	b.ReportMetric(float64(conformance.Percentile(all, 0.5).Microseconds()), "handoff-p50-µs")
	b.ReportMetric(float64(conformance.Percentile(all, 0.99).Microseconds()), "handoff-p99-µs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkSuite runs the shared conformance benchmarks (acquire+release,
// hand-off, 8-way contention) on a real server.
func BenchmarkSuite(b *testing.B) {
	r := testserver.StartRedis(b)
	conformance.RunBenchmarks(b, newHarness(b, r.URL()))
}

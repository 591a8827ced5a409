package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"sync/atomic"
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

// BenchmarkContended8Clients: 8 workers on one lock, each with its own
// Client (its own connections and subscription), as 8 processes would be:
// sections/s, worst wait and the per-worker spread.
//
//	go test -run XXX -bench Contended8 -benchtime 3x ./backends/redis/
func BenchmarkContended8Clients(b *testing.B) {
	r := testserver.StartRedis(b)
	var lockers []fencelock.Locker
	for range 8 {
		lockers = append(lockers, open(b, r.URL(), nil, nil))
	}
	rc := native(b, lockers[0].(*fencelock.Client))
	cpu0, wall0, pcpu0 := serverCPU(b.Context(), b, rc), time.Now(), testhelp.ProcessCPU()
	cmds0 := commands(b, rc)
	var sections, lo, hi int
	var elapsed, worst time.Duration
	for b.Loop() {
		res, err := conformance.Contended(b.Context(), lockers, "bench-contended8", 8, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		sections += res.Sections
		elapsed += res.Elapsed
		worst = max(worst, res.WaitMax)
		l, h := res.PerWorker[0], res.PerWorker[0]
		for _, n := range res.PerWorker {
			l, h = min(l, n), max(h, n)
		}
		lo, hi = lo+l, hi+h
	}
	srv, client := serverCPU(b.Context(), b, rc)-cpu0, testhelp.ProcessCPU()-pcpu0
	b.ReportMetric(float64(srv)/float64(time.Since(wall0))*100, "server-cpu-%")
	b.ReportMetric(float64(srv.Microseconds())/float64(sections), "server-cpu-µs/section")
	b.ReportMetric(float64(client.Microseconds())/float64(sections), "client-cpu-µs/section")
	b.ReportMetric(float64(commands(b, rc)-cmds0)/float64(sections), "commands/section")
	b.ReportMetric(float64(sections)/elapsed.Seconds(), "sections/s")
	b.ReportMetric(float64(worst.Microseconds())/1e3, "max-wait-ms")
	b.ReportMetric(float64(hi)/float64(max(lo, 1)), "spread")
	b.ReportMetric(0, "ns/op")
}

// commands is the server's total_commands_processed.
func commands(b *testing.B, rc goredis.UniversalClient) int64 {
	info, err := rc.Info(b.Context(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	n, _ := strconv.ParseInt(testserver.InfoField(info, "total_commands_processed"), 10, 64)
	return n
}

// BenchmarkContended8Drivers is BenchmarkContended8Clients on the bare
// driver (8 drivers, each with its own go-redis client): the difference is
// what the portable layer (contexts, the Lease, its timers) costs per
// section under contention.
//
//	go test -run XXX -bench Contended8 -benchtime 3x ./backends/redis/
func BenchmarkContended8Drivers(b *testing.B) {
	r := testserver.StartRedis(b)
	var drvs []driver.Blocker
	var rcs []*goredis.Client
	for range 8 {
		rc := goredis.NewClient(&goredis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
		rcs = append(rcs, rc)
		d := redis.NewDriver(rc)
		drvs = append(drvs, d.(driver.Blocker))
		b.Cleanup(func() { _ = d.Close(); _ = rc.Close() })
	}
	cpu0, pcpu0 := serverCPU(b.Context(), b, rcs[0]), testhelp.ProcessCPU()
	var total atomic.Int64
	var elapsed time.Duration
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		t0 := time.Now()
		var wg sync.WaitGroup
		for _, d := range drvs {
			wg.Go(func() {
				for ctx.Err() == nil {
					var tok [16]byte
					_, _ = rand.Read(tok[:])
					l, _, err := d.Acquire(ctx, driver.AcquireRequest{Name: "bench-contended8-drivers", Token: hex.EncodeToString(tok[:]), TTL: 30 * time.Second})
					if err != nil {
						return
					}
					total.Add(1)
					_ = l.Release(context.Background())
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(t0)
		cancel()
	}
	srv, client := serverCPU(b.Context(), b, rcs[0])-cpu0, testhelp.ProcessCPU()-pcpu0
	n := float64(total.Load())
	b.ReportMetric(float64(srv.Microseconds())/n, "server-cpu-µs/section")
	b.ReportMetric(float64(client.Microseconds())/n, "client-cpu-µs/section")
	b.ReportMetric(n/elapsed.Seconds(), "sections/s")
	b.ReportMetric(0, "ns/op")
}

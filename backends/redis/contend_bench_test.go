package redis_test

import (
	"strconv"

	goredis "github.com/redis/go-redis/v9"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
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
	cpu0, wall0, pcpu0 := serverCPU(b.Context(), b, rc), time.Now(), processCPU()
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
	srv, client := serverCPU(b.Context(), b, rc)-cpu0, processCPU()-pcpu0
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

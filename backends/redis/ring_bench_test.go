package redis

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
)

// serverMeter reads what the server counts: its CPU time, the commands it
// ran (scripts and the commands they call), and the time spent inside
// EVALSHA as it measures each command (commandstats): the scripts' own
// cost, without the I/O around them.
type serverMeter struct {
	b   *testing.B
	c   goredis.UniversalClient
	cpu float64 // s
	cmd float64
	us  float64 // µs in EVALSHA
}

func (m *serverMeter) info(section, field string) string {
	s, err := m.c.Info(m.b.Context(), section).Result()
	if err != nil {
		m.b.Fatal(err)
	}
	return testserver.InfoField(s, field)
}

func (m *serverMeter) read() (cpu, cmd, us float64) {
	u, _ := strconv.ParseFloat(m.info("cpu", "used_cpu_user"), 64)
	s, _ := strconv.ParseFloat(m.info("cpu", "used_cpu_sys"), 64)
	cmd, _ = strconv.ParseFloat(m.info("stats", "total_commands_processed"), 64)
	var calls float64
	_, _ = fmt.Sscanf(m.info("commandstats", "cmdstat_evalsha"), "calls=%g,usec=%g", &calls, &us)
	return u + s, cmd, us
}

func (m *serverMeter) start() { m.cpu, m.cmd, m.us = m.read() }

// report reports the costs since start per n of unit.
func (m *serverMeter) report(n int, unit string) {
	cpu, cmd, us := m.read()
	m.b.ReportMetric((cpu-m.cpu)*1e6/float64(n), "server-cpu-µs/"+unit)
	m.b.ReportMetric((us-m.us)/float64(n), "script-µs/"+unit)
	// Less read's own 4 INFO commands.
	m.b.ReportMetric((cmd-m.cmd-4)/float64(n), "commands/"+unit)
	m.b.ReportMetric(0, "ns/op")
}

func scriptBench(b *testing.B) (*backend, *serverMeter) {
	r := testserver.StartRedis(b)
	o, err := goredis.ParseURL(r.URL())
	if err != nil {
		b.Fatal(err)
	}
	bk := newBackend(goredis.NewClient(o), true)
	b.Cleanup(func() { _ = bk.Close() })
	return bk, &serverMeter{b: b, c: bk.client}
}

// BenchmarkScriptRing: the server's side of 8-way contention without the
// clients' scheduling: 8 tokens take turns on one lock, driven through
// the scripts from one goroutine. Each step is what a contended grant
// costs the server: the holder's release, which hands the lock to the
// head of the line, and the releaser's next blocked attempt, which joins
// the line again.
//
//	go test -run XXX -bench Script ./backends/redis/
func BenchmarkScriptRing(b *testing.B) {
	bk, m := scriptBench(b)
	ctx := b.Context()
	name := fmt.Sprintf("bench-ring-%d", time.Now().UnixNano())
	k := keysFor(name)
	const n = 8
	live := liveness(refresh(time.Second)) // as a waiter with a 1s TTL
	reqs := make([]driver.AcquireRequest, n)
	for i := range reqs {
		reqs[i] = driver.AcquireRequest{Name: name, Token: fmt.Sprintf("%032x", i+1), TTL: 30 * time.Second}
	}
	first, err := bk.TryAcquire(ctx, reqs[0])
	if err != nil {
		b.Fatal(err)
	}
	l := first.(*lease)
	join := func(i int) {
		if _, err := bk.attempt(ctx, k, reqs[i], live, bk.hub.id); err == nil {
			b.Fatalf("token %d was granted a held lock", i)
		}
	}
	for i := 1; i < n; i++ {
		join(i)
	}
	cur, grants := 0, 0
	m.start()
	for b.Loop() {
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		join(cur)
		cur = (cur + 1) % n
		l = bk.newLease(k, reqs[cur], 1, time.Now()) // handed to the next
		grants++
	}
	m.report(grants, "grant")
}

// BenchmarkScriptCycle: the server's cost of an uncontended TryAcquire
// and Release through the driver.
func BenchmarkScriptCycle(b *testing.B) {
	bk, m := scriptBench(b)
	ctx := b.Context()
	name := fmt.Sprintf("bench-cycle-%d", time.Now().UnixNano())
	cycles := 0
	m.start()
	for b.Loop() {
		l, err := bk.TryAcquire(ctx, driver.AcquireRequest{Name: name, Token: fmt.Sprintf("%032x", cycles), TTL: 30 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		cycles++
	}
	m.report(cycles, "cycle")
}

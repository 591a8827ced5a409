package redlock

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

var costImpl = flag.String("cost-impl", "fencelock", "BenchmarkContendedCost: fencelock or redsync")

// processCPU is this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverStats is one primary's INFO cpu and commandstats.
type serverStats struct {
	cpu   time.Duration
	calls map[string]int64 // command → calls
	usec  map[string]int64 // command → µs inside the command
}

func readStats(ctx context.Context, tb testing.TB, rc *goredis.Client) serverStats {
	info, err := rc.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	s := serverStats{calls: map[string]int64{}, usec: map[string]int64{}}
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, _ := strconv.ParseFloat(testserver.InfoField(info, f), 64)
		s.cpu += time.Duration(v * float64(time.Second))
	}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		for kv := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				s.calls[name] = n
			case "usec":
				s.usec[name] = n
			}
		}
	}
	return s
}

// BenchmarkContendedCost breaks an 8-way contended run of fencelock's
// Redlock down per grant: grants per second, this process's CPU (all 8
// Clients, each its own, as `make bench-peers` runs them), each primary's
// CPU (INFO cpu: commands and network I/O), and each primary's commands
// (INFO commandstats: calls and µs inside them) per grant, the lead
// (primary 0) apart from the mean of the others.
//
//	cd bench && go test -run XXX -bench ContendedCost -benchtime 3x ./redlock/
func BenchmarkContendedCost(b *testing.B) {
	m := primaries(b, 5, nil)
	ctx := b.Context()
	var rcs []*goredis.Client
	for _, a := range m.Addrs() {
		rc := goredis.NewClient(&goredis.Options{Addr: a})
		b.Cleanup(func() { _ = rc.Close() })
		rcs = append(rcs, rc)
	}
	type cycle func(ctx context.Context) (func(context.Context) error, error)
	var cs []cycle
	opt := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	for range 8 {
		if *costImpl == "redsync" {
			rs := newRedsync(b, m)
			cs = append(cs, func(ctx context.Context) (func(context.Context) error, error) {
				mu := rs.NewMutex("cost", redsync.WithExpiry(10*time.Second))
				if err := mu.LockContext(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { _, err := mu.UnlockContext(ctx); return err }, nil
			})
			continue
		}
		c := openFencelock(b, m)
		cs = append(cs, func(ctx context.Context) (func(context.Context) error, error) {
			l, err := c.Acquire(ctx, "cost", opt)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		})
	}
	const d = 2 * time.Second
	var grants, rounds int
	var client time.Duration
	srv := make([]time.Duration, len(rcs))
	calls := make([]map[string]int64, len(rcs))
	usec := make([]map[string]int64, len(rcs))
	for i := range rcs {
		calls[i], usec[i] = map[string]int64{}, map[string]int64{}
	}
	var wall time.Duration
	for b.Loop() {
		rounds++
		before := make([]serverStats, len(rcs))
		for i, rc := range rcs {
			before[i] = readStats(ctx, b, rc)
		}
		rctx, cancel := context.WithTimeout(ctx, d)
		var mu sync.Mutex
		var errs []error
		n := 0
		var wg sync.WaitGroup
		c0, t0 := processCPU(), time.Now()
		for _, c := range cs {
			wg.Go(func() {
				for rctx.Err() == nil {
					release, err := c(rctx)
					if err != nil {
						if rctx.Err() == nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
						return
					}
					mu.Lock()
					n++
					mu.Unlock()
					if err := release(ctx); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		cancel()
		wall += time.Since(t0)
		client += processCPU() - c0
		for _, err := range errs {
			b.Fatal(err)
		}
		grants += n
		for i, rc := range rcs {
			after := readStats(ctx, b, rc)
			srv[i] += after.cpu - before[i].cpu
			for k, v := range after.calls {
				calls[i][k] += v - before[i].calls[k]
				usec[i][k] += after.usec[k] - before[i].usec[k]
			}
		}
	}
	g := float64(grants)
	b.ReportMetric(g/wall.Seconds(), "grants/s")
	b.ReportMetric(float64(client.Microseconds())/g, "client-µs/grant")
	var total time.Duration
	for _, s := range srv {
		total += s
	}
	b.ReportMetric(float64(total.Microseconds())/g, "servers-µs/grant")
	b.ReportMetric(0, "ns/op")
	var lines []string
	for i := range rcs {
		var names []string
		for k := range calls[i] {
			if calls[i][k] > 0 {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		line := fmt.Sprintf("primary %d: cpu %.0f µs/grant;", i, float64(srv[i].Microseconds())/g)
		for _, k := range names {
			line += fmt.Sprintf(" %s %.2f calls (%.1f µs in cmd)", k, float64(calls[i][k])/g, float64(usec[i][k])/g)
		}
		lines = append(lines, line)
	}
	b.Logf("%d grants in %v over %d rounds\n%s", grants, wall.Round(time.Millisecond), rounds, strings.Join(lines, "\n"))
}

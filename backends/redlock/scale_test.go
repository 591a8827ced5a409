package redlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// scriptCalls is the number of script calls (EVALSHA and EVAL: every
// acquire, renewal and release runs one script on each primary it
// reaches) the primaries have processed, summed, from INFO commandstats.
func scriptCalls(t testing.TB, m *testserver.RedisNodes) int64 {
	t.Helper()
	var total int64
	for _, n := range m.Nodes {
		v, err := n.Do(context.Background(), "INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		info, _ := v.(string)
		for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
			f := testserver.InfoField(info, cmd) // calls=N,usec=…
			if f == "" {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(f, "calls="), ",")
			c, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				t.Fatalf("%s in INFO commandstats (%q): %v", cmd, f, err)
			}
			total += c
		}
	}
	return total
}

// holdMany holds n leases on one Client over five primaries for hold and
// returns the result and the script calls per second, over all primaries,
// while they were held (acquires and releases left out).
func holdMany(t testing.TB, n int, ttl, hold time.Duration) (conformance.HoldManyResult, float64) {
	m := testserver.StartRedisNodes(t, 5, nil)
	c := open(t, m.URL(), nil)
	before, t0 := scriptCalls(t, m), time.Now()
	res, err := conformance.HoldMany(context.Background(), c, name(t), n, ttl, hold)
	if err != nil {
		t.Fatal(err)
	}
	calls := scriptCalls(t, m) - before
	// An acquire and a release each run one script on every primary (the
	// acquire also writes its fence back, a second script per primary it
	// reaches): count at most 3 per lease and primary as not renewals.
	return res, float64(calls-3*5*int64(n)) / time.Since(t0).Seconds()
}

// TestHoldManyLeases: many Redlock leases on one Client add O(1)
// goroutines, stay held through several renewals each, and cost about one
// script call per lease, primary and renewal (TTL/3). The full 10,000 run
// is BenchmarkHold10000.
func TestHoldManyLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: holds 200 leases on five primaries for 6 s")
	}
	const n, ttl = 200, 2 * time.Second
	const hold = 3*ttl + ttl/6
	res, rate := holdMany(t, n, ttl, hold)
	t.Logf("%v, %.0f renewal script calls/s over 5 primaries", res, rate)
	if err := res.Check(50); err != nil {
		t.Error(err)
	}
	// Each lease renews every TTL/3 on each of the 5 primaries.
	want := float64(n) * 5 * 3 / ttl.Seconds()
	if rate < want/2 || rate > want*2 {
		t.Errorf("%.0f renewal script calls/s while holding %d leases with a %v TTL, want about %.0f (one per lease and primary per TTL/3)", rate, n, ttl, want)
	}
}

// BenchmarkHold10000: 10,000 leases with a 10 s TTL on five primaries
// (3,000 renewals a second, each to every primary) held for three TTLs.
func BenchmarkHold10000(b *testing.B) {
	for b.Loop() {
		res, rate := holdMany(b, 10000, 10*time.Second, 30*time.Second+10*time.Second/6)
		b.ReportMetric(float64(res.Goroutines), "goroutines")
		b.ReportMetric(float64(res.HeapPerLease), "B/lease")
		b.ReportMetric(float64(res.Lost), "lost")
		b.ReportMetric(rate, "renewal-scripts/s")
	}
}

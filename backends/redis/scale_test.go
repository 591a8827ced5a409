package redis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// commandCalls is the number of script calls (EVALSHA: every acquire,
// renewal and release is one) the server has processed, from INFO
// commandstats.
func commandCalls(t testing.TB, rc goredis.UniversalClient) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	f := testserver.InfoField(info, "cmdstat_evalsha") // calls=N,usec=…
	if f == "" {
		return 0 // no script called yet
	}
	calls, _, _ := strings.Cut(strings.TrimPrefix(f, "calls="), ",")
	n, err := strconv.ParseInt(calls, 10, 64)
	if err != nil {
		t.Fatalf("cmdstat_evalsha in INFO commandstats (%q): %v", f, err)
	}
	return n
}

// holdMany holds n leases on one Client for hold and returns the result
// and the server-side commands per second while they were held.
func holdMany(t testing.TB, n int, ttl, hold time.Duration) (conformance.HoldManyResult, float64) {
	r := testserver.StartRedis(t)
	c := open(t, r.URL(), nil, nil)
	rc := native(t, c)
	before, t0 := commandCalls(t, rc), time.Now()
	res, err := conformance.HoldMany(context.Background(), c, name(t), n, ttl, hold)
	if err != nil {
		t.Fatal(err)
	}
	calls := commandCalls(t, rc) - before
	// The acquires (n) and releases (n) are not renewals.
	return res, float64(calls-2*int64(n)) / time.Since(t0).Seconds()
}

// TestHoldManyLeases: many leases on one Client add O(1) goroutines (Redis
// leases need no goroutine: renewals are the portable layer's timers), stay
// held through several renewals each, and cost one script call per lease
// per renewal (TTL/3). The full 10,000 run is BenchmarkHold10000.
func TestHoldManyLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: holds 500 leases for 6 s")
	}
	// 750 renewals/s: room for a CI machine whose 2 cores are busy with
	// other packages' tests under -race.
	const n, ttl = 500, 2 * time.Second
	// The leases are taken within a moment, so their renewals come in bursts
	// every TTL/3; the hold ends between two bursts to sample the steady
	// state.
	const hold = 3*ttl + ttl/6
	res, rate := holdMany(t, n, ttl, hold)
	t.Logf("%v, %.0f renewal commands/s", res, rate)
	if err := res.Check(50); err != nil {
		t.Error(err)
	}
	// Each lease renews every TTL/3: about n×3/TTL commands a second. Fewer
	// than half of that means renewals did not happen (and the leases were
	// kept by their TTL alone); more than twice that, a renewal costs more
	// than one command.
	want := float64(n) * 3 / ttl.Seconds()
	if rate < want/2 || rate > want*2 {
		t.Errorf("%.0f renewal commands/s while holding %d leases with a %v TTL, want about %.0f (one per lease per TTL/3)", rate, n, ttl, want)
	}
}

// BenchmarkHold10000: 10,000 leases with a 10 s TTL (3,000 renewals a
// second) held for three TTLs.
func BenchmarkHold10000(b *testing.B) {
	for b.Loop() {
		res, rate := holdMany(b, 10000, 10*time.Second, 30*time.Second+10*time.Second/6)
		b.ReportMetric(float64(res.Goroutines), "goroutines")
		b.ReportMetric(float64(res.HeapPerLease), "B/lease")
		b.ReportMetric(float64(res.Lost), "lost")
		b.ReportMetric(rate, "renewals/s")
	}
}

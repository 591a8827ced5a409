package zookeeper_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock/conformance"
)

// Many leases on one Client: one session, no goroutine per lease (loss is
// watched with a callback, renewals run on timers), and auto-renew keeps
// every one held for three TTLs. The full 10,000 run is BenchmarkHold10000.
func TestHoldManyLeases(t *testing.T) {
	c := open(t, sharedURL(t), nil)
	const n, ttl = 500, 5 * time.Second
	r, err := conformance.HoldMany(t.Context(), c, name(t), n, ttl, 3*ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if r.Lost != 0 {
		t.Errorf("%d of %d auto-renewed leases lost within 3×TTL", r.Lost, n)
	}
	// A renewal waiting for ZooKeeper's answer runs on a goroutine (on a
	// loaded machine, a hundred may be in flight); a goroutine per lease
	// would show n. The at-rest bound is TestManyLeasesOneSession's.
	if r.Goroutines > n/2 {
		t.Errorf("holding %d leases added %d goroutines: want O(1) per Client, not per lease", n, r.Goroutines)
	}
}

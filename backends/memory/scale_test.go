package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/conformance"
)

// Many leases on one Client cost O(1) goroutines (loss is watched with a
// callback, renewals run on timers), and auto-renew keeps every one held
// for three TTLs. The full 10,000 run is BenchmarkHold10000.
func TestHoldManyLeases(t *testing.T) {
	c, err := memory.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 250 renewals/s: room for a CI machine whose 2 cores are busy with
	// other packages' tests under -race.
	const n, ttl = 500, 2 * time.Second
	r, err := conformance.HoldMany(context.Background(), c, "many", n, ttl, 3*ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if err := r.Check(50); err != nil {
		t.Error(err)
	}
}

func BenchmarkHold10000(b *testing.B) {
	c, err := memory.New(nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		r, err := conformance.HoldMany(context.Background(), c, "many", 10000, time.Second, 3*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(r.Goroutines), "goroutines")
		b.ReportMetric(float64(r.HeapPerLease), "B/lease")
		b.ReportMetric(float64(r.Lost), "lost")
	}
}

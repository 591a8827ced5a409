package dynamodb_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/dynamodb"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestHoldManyLeases: many leases on one Client add O(1) goroutines (the
// backend runs none; renewals are timers of the portable layer) and stay
// held through several renewals each (six, over two TTLs). DynamoDB cannot batch conditional
// renewals (a transaction fails whole if one condition fails), so each
// lease costs one UpdateItem per TTL/3; the size is bounded by what one
// dynalite process serves on a shared machine. The full 10,000 run is
// BenchmarkHold10000.
func TestHoldManyLeases(t *testing.T) {
	d := testserver.StartDynalite(t)
	// A pool of 8 connections (16 goroutines at most), so that a
	// goroutine per lease would show above it.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = 8, 8
	defer tr.CloseIdleConnections()
	var mux fencelock.URLMux
	mux.Register(dynamodb.Scheme, &dynamodb.URLOpener{HTTPClient: &http.Client{Transport: tr, Timeout: 10 * time.Second}})
	c, err := mux.Open(t.Context(), d.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 100 leases renewed every TTL/3: 33 UpdateItems a second on average,
	// which a dynalite on a loaded 2-core machine serves.
	// The leases are taken within a second, so their renewals come in
	// bursts every TTL/3, each queueing on the 8 connections for a moment;
	// the hold ends between two bursts (at 2×TTL + TTL/6) to sample the
	// steady state, not a burst.
	const n, ttl = 100, 9 * time.Second
	r, err := conformance.HoldMany(t.Context(), c, name(t), n, ttl, 2*ttl+ttl/6)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if err := r.Check(60); err != nil {
		t.Error(err)
	}
}

// BenchmarkHold10000: 10,000 leases with a 60s TTL (renewed every TTL/3:
// about 500 renewals a second, in bursts as they were taken) held for
// three TTLs. It lost 1,423 leases (and twice crashed dynalite) while
// requests queued for connections inside the request timeout; the
// Client's request window (pace.go) keeps them out of it.
func BenchmarkHold10000(b *testing.B) {
	d := testserver.StartDynalite(b)
	c := open(b, d.URL(), nil)
	for b.Loop() {
		r, err := conformance.HoldMany(b.Context(), c, "bench-hold", 10000, time.Minute, 3*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(r.Goroutines), "goroutines")
		b.ReportMetric(float64(r.HeapPerLease), "B/lease")
		b.ReportMetric(float64(r.Lost), "lost")
		b.ReportMetric(r.AcquireElapsed.Seconds(), "acquire-all-s")
	}
}

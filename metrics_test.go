package fencelock_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fencelock/fencelock"
)

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	c := memClient(t, nil, &fencelock.Options{MeterProvider: mp})
	defer c.Close()

	l, err := c.TryAcquire(ctx, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "m", nil); err == nil {
		t.Fatal("second TryAcquire succeeded")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lost, err := c.TryAcquire(ctx, "m", &fencelock.AcquireOptions{TTL: 10 * time.Millisecond, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	<-lost.Done()
	// A lease still held when the Client closes ends, but is not lost.
	held, err := c.TryAcquire(ctx, "held", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-held.Done()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[m.Name] += int64(p.Count)
				}
			}
		}
	}
	want := map[string]int64{
		"fencelock.acquire.attempts":     4,
		"fencelock.acquire.acquired":     3,
		"fencelock.acquire.not_acquired": 1,
		"fencelock.acquire.wait":         3,
		"fencelock.lease.hold":           3,
		"fencelock.lease.lost":           1,
		"fencelock.fence.last":           int64(held.Fence()),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
}

package fencelock

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of fencelock's metrics.
const meterName = "github.com/fencelock/fencelock"

// metrics are the OpenTelemetry instruments of one Client. They go through
// the OTel API only: without an SDK installed by the application they are
// no-ops. Every measurement carries the attribute fencelock.backend.
//
//	fencelock.acquire.attempts       requests for a grant sent to the store: each try
//	                                 (TryAcquire, and each retry of a polling Acquire);
//	                                 an Acquire that waits inside the store (every
//	                                 backend but mem) counts once, however long it waits
//	fencelock.acquire.acquired       leases granted (= fences issued)
//	fencelock.acquire.not_acquired   tries that found the lock held (a wait inside the
//	                                 store is not a refusal: it ends in a grant or an error)
//	fencelock.acquire.wait           seconds from Acquire's call to the grant
//	fencelock.lease.hold             seconds from grant to the lease's end
//	fencelock.lease.renew_failures   renewals that failed (the lease may survive)
//	fencelock.lease.lost             leases that ended by loss, not Release
//	                                 (nor Client.Close: a shutdown is not a loss)
//	fencelock.fence.last             the last fence issued
type metrics struct {
	attrs         metric.MeasurementOption
	addOpts       []metric.AddOption    // attrs, preallocated: no per-call slice
	recOpts       []metric.RecordOption // attrs, preallocated
	attempts      metric.Int64Counter
	acquired      metric.Int64Counter
	notAcquired   metric.Int64Counter
	wait          metric.Float64Histogram
	hold          metric.Float64Histogram
	renewFailures metric.Int64Counter
	lost          metric.Int64Counter
	fence         metric.Int64Gauge
}

func newMetrics(mp metric.MeterProvider, backend string) *metrics {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(meterName)
	// Instrument creation only fails on invalid names; ours are constant and
	// valid, and the API returns a usable no-op instrument on error anyway.
	x := &metrics{attrs: metric.WithAttributes(attribute.String("fencelock.backend", backend))}
	x.addOpts, x.recOpts = []metric.AddOption{x.attrs}, []metric.RecordOption{x.attrs}
	x.attempts, _ = m.Int64Counter("fencelock.acquire.attempts", metric.WithDescription("Lock acquisition attempts sent to the store."))
	x.acquired, _ = m.Int64Counter("fencelock.acquire.acquired", metric.WithDescription("Leases granted (fences issued)."))
	x.notAcquired, _ = m.Int64Counter("fencelock.acquire.not_acquired", metric.WithDescription("Attempts that found the lock held."))
	x.wait, _ = m.Float64Histogram("fencelock.acquire.wait", metric.WithUnit("s"), metric.WithDescription("Time from Acquire's call to the grant."))
	x.hold, _ = m.Float64Histogram("fencelock.lease.hold", metric.WithUnit("s"), metric.WithDescription("Time from grant to the lease's end."))
	x.renewFailures, _ = m.Int64Counter("fencelock.lease.renew_failures", metric.WithDescription("Renewals that failed."))
	x.lost, _ = m.Int64Counter("fencelock.lease.lost", metric.WithDescription("Leases that ended by loss rather than Release."))
	x.fence, _ = m.Int64Gauge("fencelock.fence.last", metric.WithDescription("The last fence issued."))
	return x
}

func (m *metrics) add(c metric.Int64Counter) { c.Add(context.Background(), 1, m.addOpts...) }

func (m *metrics) granted(fence Fence, since time.Time) {
	ctx := context.Background()
	m.acquired.Add(ctx, 1, m.addOpts...)
	m.fence.Record(ctx, fence.Int64(), m.recOpts...)
	m.wait.Record(ctx, time.Since(since).Seconds(), m.recOpts...)
}

func (m *metrics) held(since time.Time) {
	m.hold.Record(context.Background(), time.Since(since).Seconds(), m.recOpts...)
}

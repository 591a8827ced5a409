package dynamodb_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// The benchmarks run against dynalite (or DYNAMODB_URL):
//
//	go test -run XXX -bench . -benchtime 200x ./backends/dynamodb/

var noRenew = &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)}

// BenchmarkAcquireRelease: uncontended TryAcquire+Release (one conditional
// UpdateItem each), interleaved with the AWS Lock Client protocol's
// acquire+release written plainly on an SDK client with its defaults
// (conditional PutItem, conditional DeleteItem, as benchpeers' peer) and
// one raw GetItem round trip on fencelock's client; ratio is fencelock's
// p50 over the protocol's.
func BenchmarkAcquireRelease(b *testing.B) {
	d := testserver.StartDynalite(b)
	ctx := b.Context()
	c := open(b, d.URL(), nil)
	dc := native(b, c)
	table := tableOf(b, d.URL())
	s := attrS
	peerKey := map[string]types.AttributeValue{"key": s("bench-peer")}
	// The protocol's client as benchpeers opens it: the SDK's defaults
	// (its own HTTP client), or fencelock's when the server is external.
	pc := dc
	if e := d.Endpoint(); e != "" {
		pc = ddb.New(ddb.Options{Region: "us-east-1", BaseEndpoint: aws.String(e),
			Credentials: credentials.NewStaticCredentialsProvider("dummy", "dummy", "")})
	}
	var cycle, peer, rtt []time.Duration
	for b.Loop() {
		t0 := time.Now()
		l, err := c.TryAcquire(ctx, "bench-acquire-release", noRenew)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		rvn := randHex(16)
		if _, err := pc.PutItem(ctx, &ddb.PutItemInput{TableName: &table,
			Item:                map[string]types.AttributeValue{"key": s("bench-peer"), "ownerName": s("peer"), "recordVersionNumber": s(rvn), "leaseDuration": s("30000")},
			ConditionExpression: aws.String("attribute_not_exists(#k)"), ExpressionAttributeNames: map[string]string{"#k": "key"}}); err != nil {
			b.Fatal(err)
		}
		if _, err := pc.DeleteItem(ctx, &ddb.DeleteItemInput{TableName: &table, Key: peerKey,
			ConditionExpression:       aws.String("#r = :r AND #o = :o"),
			ExpressionAttributeNames:  map[string]string{"#r": "recordVersionNumber", "#o": "ownerName"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":r": s(rvn), ":o": s("peer")}}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		_, err = dc.GetItem(ctx, &ddb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"key": s("bench-acquire-release")}})
		if err != nil {
			b.Fatal(err)
		}
		cycle, peer, rtt = append(cycle, t1.Sub(t0)), append(peer, t2.Sub(t1)), append(rtt, time.Since(t2))
	}
	p50, peer50 := conformance.Percentile(cycle, 0.5), conformance.Percentile(peer, 0.5)
	b.ReportMetric(float64(p50.Microseconds()), "acquire+release-p50-µs")
	b.ReportMetric(float64(peer50.Microseconds()), "lockclient-p50-µs")
	b.ReportMetric(float64(p50)/float64(peer50), "ratio")
	b.ReportMetric(float64(conformance.Percentile(rtt, 0.5).Microseconds()), "getitem-rtt-p50-µs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkHandOff: from the holder's Release call to the blocked
// Acquire's return, with poll_interval=20ms; the target is p50 ≤ the poll
// interval + one round trip (reported alongside).
func BenchmarkHandOff(b *testing.B) {
	d := testserver.StartDynalite(b)
	ctx := b.Context()
	const poll = 20 * time.Millisecond
	u := d.URL() + "&poll_interval=20ms"
	a, w := open(b, u, nil), open(b, u, nil)
	dc := native(b, a)
	table := tableOf(b, d.URL())
	var all, rtt []time.Duration
	for b.Loop() {
		lat, err := conformance.HandOffLatencies(ctx, a, w, "bench-handoff", 1)
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, lat...)
		t0 := time.Now()
		if _, err := dc.GetItem(ctx, &ddb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: "bench-handoff"}}}); err != nil {
			b.Fatal(err)
		}
		rtt = append(rtt, time.Since(t0))
	}
	p50 := conformance.Percentile(all, 0.5)
	bound := poll + conformance.Percentile(rtt, 0.5)
	b.ReportMetric(float64(p50.Microseconds()), "handoff-p50-µs")
	b.ReportMetric(float64(conformance.Percentile(all, 0.99).Microseconds()), "handoff-p99-µs")
	b.ReportMetric(float64(bound.Microseconds()), "poll+rtt-µs")
	b.ReportMetric(0, "ns/op")
	if p50 > bound {
		b.Logf("hand-off p50 %v above poll interval + one round trip (%v)", p50, bound)
	}
}

// BenchmarkSuite runs the shared conformance benchmarks on a real server.
func BenchmarkSuite(b *testing.B) {
	d := testserver.StartDynalite(b)
	conformance.RunBenchmarks(b, conformance.URLHarness(d.URL()+"&poll_interval=20ms"))
}

// BenchmarkContended: 8 Clients (opened by URL with defaults, TTL 15s)
// take and release one lock in a loop for 2s, as benchpeers' contended
// measure does; reported: grants per second, the requests per grant by
// operation (counted on the wire: what DynamoDB would bill), the worst
// wait, the spread of grants across the Clients, and the CPU time per
// grant of this process (all 8 Clients) and of dynalite.
func BenchmarkContended(b *testing.B) {
	d := testserver.StartDynalite(b)
	w := newWire()
	w.base.MaxIdleConnsPerHost = 64 // as a URL-opened Client's pool
	cs := make([]*fencelock.Client, 8)
	for i := range cs {
		cs[i] = openWire(b, d.URL(), w, 3)
	}
	key := name(b)
	o := &fencelock.AcquireOptions{TTL: 15 * time.Second, AutoRenew: fencelock.Bool(false)}
	for b.Loop() {
		w.take()
		pid := 0
		if d.Proc != nil {
			pid = d.Proc.PID()
		}
		cpu0, srv0 := selfCPU(), procCPU(pid)
		rctx, cancel := context.WithTimeout(b.Context(), 2*time.Second)
		counts := make([]int, len(cs))
		worst := make([]time.Duration, len(cs))
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Go(func() {
				for rctx.Err() == nil {
					t0 := time.Now()
					l, err := c.Acquire(rctx, key, o)
					worst[i] = max(worst[i], time.Since(t0))
					if err != nil {
						if rctx.Err() == nil {
							b.Error(err)
						}
						return
					}
					counts[i]++
					_ = l.Release(context.WithoutCancel(rctx))
				}
			})
		}
		wg.Wait()
		cancel()
		ops := w.take()
		cpu, srv := selfCPU()-cpu0, procCPU(pid)-srv0
		grants := 0
		for _, n := range counts {
			grants += n
		}
		if grants == 0 {
			out, _ := native(b, cs[0]).GetItem(b.Context(), &ddb.GetItemInput{TableName: aws.String(tableOf(b, d.URL())), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: key}}})
			b.Logf("%#v ops %v", out.Item, ops)
			for k, v := range out.Item {
				b.Logf("%s %#v", k, v)
			}
			b.Fatal("no grants")
		}
		b.ReportMetric(float64(grants)/2, "grants/s")
		b.ReportMetric(float64(cpu.Microseconds())/float64(grants), "client-cpu-µs/grant")
		b.ReportMetric(float64(srv.Microseconds())/float64(grants), "dynalite-cpu-µs/grant")
		b.ReportMetric(float64(ops["UpdateItem"])/float64(grants), "writes/grant")
		b.ReportMetric(float64(ops["GetItem"])/float64(grants), "reads/grant")
		b.ReportMetric(float64(slices.Max(worst).Milliseconds()), "worst-wait-ms")
		b.ReportMetric(float64(slices.Max(counts))/float64(max(1, slices.Min(counts))), "spread")
	}
	b.ReportMetric(0, "ns/op")
}

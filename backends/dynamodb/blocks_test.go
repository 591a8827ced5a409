package dynamodb_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// BenchmarkAcquireReleaseBlocks measures uncontended acquire+release as
// benchpeers does, in blocks of 100 pairs back to back per
// implementation (not interleaved pair by pair as BenchmarkAcquireRelease),
// the blocks alternated: fencelock's TryAcquire+Release; the AWS Lock
// Client protocol's PutItem+DeleteItem on its own SDK-default client; and
// fencelock's two request shapes (the fast-path acquire UpdateItem and the
// release UpdateItem) sent raw on that same SDK-default client, which
// splits fencelock's client-side cost from the requests' server-side
// cost. The blocks' order rotates every iteration. Reported per shape: the p50 of a pair, and the CPU per pair of
// this process and of dynalite. DYN_SHAPE=<name> runs one shape only
// (for a -cpuprofile).
func BenchmarkAcquireReleaseBlocks(b *testing.B) {
	d := testserver.StartDynalite(b)
	ctx := b.Context()
	c := open(b, d.URL(), nil)
	table := tableOf(b, d.URL())
	if d.Endpoint() == "" {
		b.Skip("needs a dynalite started by the test (its CPU is measured)")
	}
	pc := ddb.New(ddb.Options{Region: "us-east-1", BaseEndpoint: aws.String(d.Endpoint()),
		Credentials: credentials.NewStaticCredentialsProvider("dummy", "dummy", "")})
	s, n := attrS, attrN
	pid := d.Proc.PID()
	newUUID := func() string {
		h := randHex(16)
		return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	}
	shapes := []struct {
		name string
		do   func() error
	}{
		{"fencelock", func() error {
			l, err := c.TryAcquire(ctx, "blocks-fencelock", noRenew)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{"lockclient", func() error {
			rvn := randHex(16)
			if _, err := pc.PutItem(ctx, &ddb.PutItemInput{TableName: &table,
				Item:                map[string]types.AttributeValue{"key": s("blocks-peer"), "ownerName": s("peer"), "recordVersionNumber": s(rvn), "leaseDuration": s("30000")},
				ConditionExpression: aws.String("attribute_not_exists(#k)"), ExpressionAttributeNames: map[string]string{"#k": "key"}}); err != nil {
				return err
			}
			_, err := pc.DeleteItem(ctx, &ddb.DeleteItemInput{TableName: &table, Key: map[string]types.AttributeValue{"key": s("blocks-peer")},
				ConditionExpression:       aws.String("#r = :r AND #o = :o"),
				ExpressionAttributeNames:  map[string]string{"#r": "recordVersionNumber", "#o": "ownerName"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":r": s(rvn), ":o": s("peer")}})
			return err
		}},
	}
	type rawState struct {
		rvn   string
		fence uint64
	}
	rawPair := func(cl *ddb.Client, k string, label bool) func() error {
		key := map[string]types.AttributeValue{"key": s(k)}
		st := &rawState{rvn: "v0", fence: 1}
		init := "SET ownerName = :on, recordVersionNumber = :r, leaseDuration = :ld, fence = :f, isReleased = :rel, waitQueue = :q"
		vals := map[string]types.AttributeValue{":on": s("x/y"), ":r": s(st.rvn), ":ld": s("30000"), ":f": n("1"), ":rel": s("1"), ":q": &types.AttributeValueMemberL{}}
		if label {
			init += ", fencelockLabel = :lb"
			vals[":lb"] = s("vm/31207")
		}
		if _, err := cl.UpdateItem(ctx, &ddb.UpdateItemInput{TableName: &table, Key: key, UpdateExpression: aws.String(init), ExpressionAttributeValues: vals}); err != nil {
			b.Fatal(err)
		}
		return func() error {
			rvn, owner := newUUID(), "vm/"+randHex(16)
			st.fence++
			if _, err := cl.UpdateItem(ctx, &ddb.UpdateItemInput{TableName: &table, Key: key,
				ConditionExpression: aws.String("#rvn = :w AND size(#q) = :zero"), UpdateExpression: aws.String("SET #on = :on, #rvn = :rvn, #f = :f REMOVE #ir"),
				ExpressionAttributeNames:  map[string]string{"#on": "ownerName", "#rvn": "recordVersionNumber", "#ir": "isReleased", "#f": "fence", "#q": "waitQueue"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":w": s(st.rvn), ":zero": n("0"), ":on": s(owner), ":rvn": s(rvn), ":f": n(itoa(st.fence))},
				ReturnValues:              types.ReturnValueNone}); err != nil {
				return err
			}
			st.rvn = newUUID()
			_, err := cl.UpdateItem(ctx, &ddb.UpdateItemInput{TableName: &table, Key: key,
				ConditionExpression: aws.String("#rvn = :r0 AND #on = :on"), UpdateExpression: aws.String("SET #ir = :rel, #rvn = :new"),
				ExpressionAttributeNames:  map[string]string{"#rvn": "recordVersionNumber", "#on": "ownerName", "#ir": "isReleased"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":r0": s(rvn), ":on": s(owner), ":rel": s("1"), ":new": s(st.rvn)}})
			return err
		}
	}
	shapes = append(shapes, []struct {
		name string
		do   func() error
	}{
		{"raw-sdkclient", rawPair(pc, "blocks-raw-a", false)},
		{"raw-fencelockclient", rawPair(native(b, c), "blocks-raw-b", false)},
		{"raw-label", rawPair(pc, "blocks-raw-c", true)},
	}...)
	if only := os.Getenv("DYN_SHAPE"); only != "" { // one shape, for a profile
		shapes = slices.DeleteFunc(shapes, func(sh struct {
			name string
			do   func() error
		}) bool {
			return sh.name != only
		})
	}
	lat := make([][]time.Duration, len(shapes))
	self, srv := make([]time.Duration, len(shapes)), make([]time.Duration, len(shapes))
	for it := 0; b.Loop(); it++ {
		for k := range shapes {
			j := (k + it) % len(shapes) // each shape's block follows each other's in turn
			sh := shapes[j]
			c0, s0 := selfCPU(), procCPU(pid)
			for range 100 {
				t0 := time.Now()
				if err := sh.do(); err != nil {
					b.Fatal(sh.name, err)
				}
				lat[j] = append(lat[j], time.Since(t0))
			}
			self[j] += selfCPU() - c0
			srv[j] += procCPU(pid) - s0
		}
	}
	for j, sh := range shapes {
		p := float64(len(lat[j]))
		b.ReportMetric(float64(conformance.Percentile(lat[j], 0.5).Microseconds()), sh.name+"-p50-µs")
		b.ReportMetric(float64(self[j].Microseconds())/p, sh.name+"-clientcpu-µs")
		b.ReportMetric(float64(srv[j].Microseconds())/p, sh.name+"-srvcpu-µs")
	}
	b.ReportMetric(0, "ns/op")
}

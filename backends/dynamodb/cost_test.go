package dynamodb_test

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// BenchmarkRequestCost: what acquire+release request shapes cost dynalite
// (p50 round trip, and its CPU per pair), interleaved on one server, next
// to the AWS Lock Client protocol's PutItem+DeleteItem: dynalite's
// expression parser makes conditions with OR branches and functions, and
// long update expressions, cost. "ours" is the general acquire write,
// H-fast-short the fast path's (see Operations, atop dynamodb.go).
// DYN_SHAPE=<name> runs one shape only (for a node --cpu-prof of
// dynalite against DYNAMODB_URL):
//
//	go test -run XXX -bench RequestCost -benchtime 100x ./backends/dynamodb/
func BenchmarkRequestCost(b *testing.B) {
	d := testserver.StartDynalite(b)
	ctx := b.Context()
	c := open(b, d.URL(), nil)
	dc := native(b, c)
	table := tableOf(b, d.URL())
	s, n := attrS, attrN
	pid := 0
	if d.Proc != nil {
		pid = d.Proc.PID()
	}
	type shape struct {
		name string
		do   func(i int) error
	}
	key := func(k string) map[string]types.AttributeValue { return map[string]types.AttributeValue{"key": s(k)} }
	upd := func(k, cond, expr string, nm map[string]string, vals map[string]types.AttributeValue, rv types.ReturnValue) error {
		_, err := dc.UpdateItem(ctx, &ddb.UpdateItemInput{TableName: &table, Key: key(k), ConditionExpression: aws.String(cond),
			UpdateExpression: aws.String(expr), ExpressionAttributeNames: nm, ExpressionAttributeValues: vals, ReturnValues: rv})
		return err
	}
	fullNames := map[string]string{"#k": "key", "#on": "ownerName", "#rvn": "recordVersionNumber", "#ld": "leaseDuration", "#ir": "isReleased", "#f": "fence", "#q": "waitQueue", "#lb": "fencelockLabel"}
	// prime items
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
		_ = upd(k, "attribute_not_exists(#k)", "SET #on = :on, #rvn = :rvn, #ld = :ld, #f = :f, #ir = :rel, #q = :e", map[string]string{"#k": "key", "#on": "ownerName", "#rvn": "recordVersionNumber", "#ld": "leaseDuration", "#f": "fence", "#ir": "isReleased", "#q": "waitQueue"},
			map[string]types.AttributeValue{":on": s("x/y"), ":rvn": s("v"), ":ld": s("30000"), ":f": n("1"), ":rel": s("1"), ":e": &types.AttributeValueMemberL{Value: []types.AttributeValue{}}}, types.ReturnValueNone)
	}
	shapes := []shape{
		{"peer-put+delete", func(i int) error {
			rvn := randHex(16)
			if _, err := dc.PutItem(ctx, &ddb.PutItemInput{TableName: &table,
				Item:                map[string]types.AttributeValue{"key": s("peer"), "ownerName": s("peer"), "recordVersionNumber": s(rvn), "leaseDuration": s("30000")},
				ConditionExpression: aws.String("attribute_not_exists(#k)"), ExpressionAttributeNames: map[string]string{"#k": "key"}}); err != nil {
				return err
			}
			_, err := dc.DeleteItem(ctx, &ddb.DeleteItemInput{TableName: &table, Key: key("peer"),
				ConditionExpression:       aws.String("#r = :r AND #o = :o"),
				ExpressionAttributeNames:  map[string]string{"#r": "recordVersionNumber", "#o": "ownerName"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":r": s(rvn), ":o": s("peer")}})
			return err
		}},
		{"ours-acq+rel", func(i int) error {
			rvn := randHex(16)
			if err := upd("a", "attribute_not_exists(#k) OR #ir = :rel AND attribute_not_exists(#q) OR #ir = :rel AND size(#q) = :zero",
				"SET #on = :on, #rvn = :rvn, #ld = :ld, #f = if_not_exists(#f, :floor) + :one REMOVE #ir, #lb", fullNames,
				map[string]types.AttributeValue{":on": s("o/" + rvn), ":rvn": s(rvn), ":ld": s("30000"), ":rel": s("1"), ":floor": n("1765000000000000"), ":one": n("1"), ":zero": n("0")}, types.ReturnValueUpdatedNew); err != nil {
				return err
			}
			return upd("a", "#rvn = :r0 AND #on = :on", "SET #ir = :rel, #rvn = :new", map[string]string{"#rvn": "recordVersionNumber", "#on": "ownerName", "#ir": "isReleased"},
				map[string]types.AttributeValue{":r0": s(rvn), ":on": s("o/" + rvn), ":rel": s("1"), ":new": s(randHex(16))}, types.ReturnValueNone)
		}},
		{"getitem", func(i int) error {
			_, err := dc.GetItem(ctx, &ddb.GetItemInput{TableName: &table, Key: key("a"), ConsistentRead: aws.Bool(true)})
			return err
		}},
		{"getitem-projected", func(i int) error {
			_, err := dc.GetItem(ctx, &ddb.GetItemInput{TableName: &table, Key: key("a"), ConsistentRead: aws.Bool(true),
				ProjectionExpression: aws.String("#k, #on, #rvn, #ld, #ir, #f, #q, #lb"), ExpressionAttributeNames: fullNames})
			return err
		}},
	}

	last := map[string]string{"g": "v", "h": "v", "i": "v"}
	rel := func(k, rvn string) error {
		nv := randHex(16)
		last[k] = nv
		rn := map[string]string{"#rvn": "recordVersionNumber", "#on": "ownerName", "#ir": "isReleased"}
		rvals := map[string]types.AttributeValue{":r0": s(rvn), ":on": s("o/" + rvn), ":rel": s("1"), ":new": s(nv)}
		rc := "#rvn = :r0 AND #on = :on"
		if k == "i" {
			rc = "#rvn = :r0"
			delete(rn, "#on")
			delete(rvals, ":on")
		}
		return upd(k, rc, "SET #ir = :rel, #rvn = :new", rn, rvals, types.ReturnValueNone)
	}
	variant := func(nm, k, cond, expr string, names []string, vals map[string]types.AttributeValue, rv types.ReturnValue) shape {
		return shape{nm, func(i int) error {
			rvn := randHex(16)
			v := maps.Clone(vals)
			v[":on"], v[":rvn"] = s("o/"+rvn), s(rvn)
			if _, ok := v[":w"]; ok || strings.Contains(cond, ":w") {
				v[":w"] = s(last[k])
			}
			m := map[string]string{}
			for _, x := range names {
				m[x] = fullNames[x]
			}
			if err := upd(k, cond, expr, m, v, rv); err != nil {
				return err
			}
			return rel(k, rvn)
		}}
	}
	base := map[string]types.AttributeValue{":ld": s("30000"), ":rel": s("1"), ":floor": n("1765000000000000"), ":one": n("1"), ":zero": n("0")}
	shapes = append(shapes,
		variant("H-fast-short", "h", "#rvn = :w AND size(#q) = :zero", "SET #on = :on, #rvn = :rvn, #f = :f REMOVE #ir",
			[]string{"#on", "#rvn", "#ir", "#f", "#q"}, map[string]types.AttributeValue{":zero": n("0"), ":f": n("12345")}, types.ReturnValueNone),
		variant("I-short-relrvn", "i", "#rvn = :w AND size(#q) = :zero", "SET #on = :on, #rvn = :rvn, #f = :f REMOVE #ir",
			[]string{"#on", "#rvn", "#ir", "#f", "#q"}, map[string]types.AttributeValue{":zero": n("0"), ":f": n("12345")}, types.ReturnValueNone),
		variant("G-fast", "g", "#rvn = :w AND size(#q) = :zero", "SET #on = :on, #rvn = :rvn, #ld = :ld, #f = :f REMOVE #ir, #lb",
			[]string{"#on", "#rvn", "#ld", "#ir", "#f", "#q", "#lb"}, map[string]types.AttributeValue{":ld": s("30000"), ":zero": n("0"), ":f": n("12345")}, types.ReturnValueNone),
		variant("B-cond-ir-size", "b", "#ir = :rel AND size(#q) = :zero", "SET #on = :on, #rvn = :rvn, #ld = :ld, #f = if_not_exists(#f, :floor) + :one REMOVE #ir, #lb",
			[]string{"#on", "#rvn", "#ld", "#ir", "#f", "#q", "#lb"}, base, types.ReturnValueUpdatedNew),
		variant("C-cond-ir-only", "c", "#ir = :rel", "SET #on = :on, #rvn = :rvn, #ld = :ld, #f = if_not_exists(#f, :floor) + :one REMOVE #ir, #lb",
			[]string{"#on", "#rvn", "#ld", "#ir", "#f", "#lb"}, map[string]types.AttributeValue{":ld": s("30000"), ":rel": s("1"), ":floor": n("1765000000000000"), ":one": n("1")}, types.ReturnValueUpdatedNew),
		variant("D-upd-plain", "d", "#ir = :rel", "SET #on = :on, #rvn = :rvn, #ld = :ld, #f = :one REMOVE #ir",
			[]string{"#on", "#rvn", "#ld", "#ir", "#f"}, map[string]types.AttributeValue{":ld": s("30000"), ":rel": s("1"), ":one": n("1")}, types.ReturnValueNone),
		variant("E-upd-f-plus", "e", "#ir = :rel", "SET #on = :on, #rvn = :rvn, #ld = :ld, #f = #f + :one REMOVE #ir",
			[]string{"#on", "#rvn", "#ld", "#ir", "#f"}, map[string]types.AttributeValue{":ld": s("30000"), ":rel": s("1"), ":one": n("1")}, types.ReturnValueUpdatedNew),
		variant("F-full-noRV", "f", "attribute_not_exists(#k) OR #ir = :rel AND attribute_not_exists(#q) OR #ir = :rel AND size(#q) = :zero", "SET #on = :on, #rvn = :rvn, #ld = :ld, #f = if_not_exists(#f, :floor) + :one REMOVE #ir, #lb",
			[]string{"#k", "#on", "#rvn", "#ld", "#ir", "#f", "#q", "#lb"}, base, types.ReturnValueNone),
	)
	if only := os.Getenv("DYN_SHAPE"); only != "" {
		shapes = slices.DeleteFunc(shapes, func(sh shape) bool { return sh.name != only })
	}
	lat := make([][]time.Duration, len(shapes))
	cpu := make([]time.Duration, len(shapes))
	for b.Loop() {
		for j, sh := range shapes {
			c0 := procCPU(pid)
			for i := range 20 {
				t0 := time.Now()
				if err := sh.do(i); err != nil {
					b.Fatal(sh.name, err)
				}
				lat[j] = append(lat[j], time.Since(t0))
			}
			cpu[j] += procCPU(pid) - c0
		}
	}
	for j, sh := range shapes {
		b.ReportMetric(float64(conformance.Percentile(lat[j], 0.5).Microseconds()), sh.name+"-p50-µs")
		b.ReportMetric(float64(cpu[j].Microseconds())/float64(len(lat[j])), sh.name+"-srvcpu-µs")
	}
	b.ReportMetric(0, "ns/op")
}

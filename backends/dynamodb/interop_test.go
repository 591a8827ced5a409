package dynamodb_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

func isCCF(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// TestInteropAWSLockClient: fencelock and the AWS Lock Client (its exact
// requests, with its defaults: PutItem on acquire, DeleteItem on release)
// exclude each other both ways, and fencelock's fence never goes back
// although that client wipes it.
func TestInteropAWSLockClient(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	c := open(t, d.URL(), nil)
	aws := &awsClient{c: native(t, c), table: tableOf(t, d.URL()), owner: "java-host-" + randHex(4), lease: time.Second}
	key := name(t)
	var last fencelock.Fence
	grant := func(l *fencelock.Lease, what string) {
		t.Helper()
		if l.Fence() <= last {
			t.Fatalf("%s: fence %d not above the earlier %d", what, l.Fence(), last)
		}
		last = l.Fence()
	}

	// 1. fencelock holds (auto-renew, 2s TTL): the AWS client, watching
	// for longer than a lease, never gets it: each heartbeat changes the
	// version it watches.
	l, err := c.TryAcquire(ctx, key, &fencelock.AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	grant(l, "first grant")
	if _, err := aws.acquire(ctx, key, 20*time.Millisecond, 3*time.Second); err == nil {
		if l.Err() == nil {
			t.Fatal("the AWS client acquired a lock fencelock holds and renews: two holders")
		}
		t.Fatalf("the AWS client acquired the lock after fencelock's lease was lost (renewals failed on a loaded machine?): %v", l.Err())
	}
	// 2. fencelock releases: the AWS client takes the released item at
	// once, replacing it (the fence attribute is gone).
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	jl, err := aws.acquire(ctx, key, 20*time.Millisecond, 0)
	if err != nil {
		t.Fatalf("the AWS client could not take a lock fencelock released: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the AWS client took %v for a released lock: it waited for the 2s lease instead of taking it", took)
	}
	it, err := aws.get(ctx, key)
	if err != nil || it["fence"] != nil {
		t.Fatalf("after the AWS client's PutItem the item still has a fence (%v, %v): the test does not wipe it", it["fence"], err)
	}
	// 3. While it heartbeats, fencelock does not get it, even waiting.
	stop := make(chan struct{})
	hbDone := make(chan error, 1)
	go func() {
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				hbDone <- nil
				return
			case <-tk.C:
				if err := aws.heartbeat(ctx, jl); err != nil {
					hbDone <- err
					return
				}
			}
		}
	}()
	_, err = c.Acquire(ctx, key, &fencelock.AcquireOptions{Wait: 2500 * time.Millisecond})
	close(stop)
	if hbErr := <-hbDone; hbErr != nil {
		t.Fatalf("AWS client heartbeat: %v", hbErr)
	}
	if !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("fencelock Acquire of a lock the AWS client holds and heartbeats: %v, want ErrNotAcquired", err)
	}
	// 4. It releases by deleting the item: fencelock takes it, with a
	// fence above the earlier ones although the counter was wiped.
	if err := aws.release(ctx, jl, true); err != nil {
		t.Fatal(err)
	}
	l, err = c.TryAcquire(ctx, key, &fencelock.AcquireOptions{TTL: 400 * time.Millisecond, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	grant(l, "grant after the AWS client deleted the item")
	// 5. fencelock's holder stops renewing: the AWS client takes over after
	// watching the version for the lease, replacing the item; fencelock's
	// Release then reports the lease lost and leaves the AWS lock alone.
	start = time.Now()
	jl, err = aws.acquire(ctx, key, 20*time.Millisecond, 3*time.Second)
	if err != nil {
		t.Fatalf("the AWS client could not take over an abandoned fencelock lock: %v", err)
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("the AWS client took over after %v, before the 400ms lease", took)
	}
	if err := l.Release(ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Release of a lock the AWS client took over: %v, want ErrLeaseLost", err)
	}
	if err := aws.heartbeat(ctx, jl); err != nil {
		t.Fatalf("the AWS client's heartbeat after fencelock's stale Release: %v", err)
	}
	// 6. The AWS client dies (no heartbeat, no release): fencelock takes
	// over only after watching its version for its whole 1s lease.
	start = time.Now()
	l, err = c.Acquire(ctx, key, &fencelock.AcquireOptions{TTL: 400 * time.Millisecond, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("fencelock could not take over the dead AWS client's lock: %v", err)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("fencelock took over after %v, before the AWS client's 1s lease", took)
	}
	grant(l, "takeover of the AWS client's replaced item")
	if err := aws.heartbeat(ctx, jl); !isCCF(err) {
		t.Fatalf("the dead AWS client's late heartbeat: %v, want a condition failure", err)
	}
	// 7. The AWS client with deleteLockOnRelease=false: it marks the item
	// released; fencelock takes it at once.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if jl, err = aws.acquire(ctx, key, 20*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if err := aws.release(ctx, jl, false); err != nil {
		t.Fatal(err)
	}
	l, err = c.TryAcquire(ctx, key, nil)
	if err != nil {
		t.Fatalf("fencelock TryAcquire of an item the AWS client marked released: %v", err)
	}
	grant(l, "grant of an item the AWS client released")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestForeignItemLayout: what fencelock writes is what the AWS Lock
// Client reads: attribute by attribute.
func TestForeignItemLayout(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	c := open(t, d.URL(), &fencelock.Options{Prefix: "app/"})
	aws := &awsClient{c: native(t, c), table: tableOf(t, d.URL())}
	n := name(t)
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 20 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	it, err := aws.get(ctx, "app/"+n)
	if err != nil || it == nil {
		t.Fatalf("no item under the prefixed key: %v", err)
	}
	s := func(a string) string {
		v, ok := it[a].(*types.AttributeValueMemberS)
		if !ok {
			t.Fatalf("attribute %s = %#v, want a string", a, it[a])
		}
		return v.Value
	}
	if got := s("leaseDuration"); got != "20000" {
		t.Errorf("leaseDuration = %q, want \"20000\" (milliseconds, as the AWS client writes it)", got)
	}
	if rvn := s("recordVersionNumber"); len(rvn) != 36 || strings.Count(rvn, "-") != 4 {
		t.Errorf("recordVersionNumber = %q, want a UUID", rvn)
	}
	if s("ownerName") == "" {
		t.Error("empty ownerName")
	}
	if it["isReleased"] != nil {
		t.Errorf("isReleased present on a held lock: %v", it["isReleased"])
	}
	if f, ok := it["fence"].(*types.AttributeValueMemberN); !ok || f.Value != l.Fence().String() {
		t.Errorf("fence = %#v, want N %d", it["fence"], l.Fence())
	}
	rvn := s("recordVersionNumber")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	it, _ = aws.get(ctx, "app/"+n)
	if it == nil {
		t.Fatal("Release deleted the item (the fence lives in it)")
	}
	if got := s("isReleased"); got != "1" {
		t.Errorf("isReleased = %q after Release, want \"1\"", got)
	}
	if s("recordVersionNumber") == rvn {
		t.Error("Release did not rotate recordVersionNumber")
	}
	if it["fence"] == nil {
		t.Error("Release removed the fence")
	}
}

// TestMalformedForeignItems: an item someone else wrote with a missing or
// malformed attribute is an error naming the attribute, never a panic and
// never a takeover, even after waiting longer than any lease.
func TestMalformedForeignItems(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	c := open(t, d.URL(), nil)
	dc := native(t, c)
	table := tableOf(t, d.URL())
	S := attrS
	good := func() map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"ownerName": S("x"), "recordVersionNumber": S("v1"), "leaseDuration": S("100")}
	}
	cases := []struct {
		attr string
		edit func(m map[string]types.AttributeValue)
	}{
		{"ownerName", func(m map[string]types.AttributeValue) { delete(m, "ownerName") }},
		{"recordVersionNumber", func(m map[string]types.AttributeValue) { delete(m, "recordVersionNumber") }},
		{"recordVersionNumber", func(m map[string]types.AttributeValue) {
			m["recordVersionNumber"] = &types.AttributeValueMemberN{Value: "7"}
		}},
		{"leaseDuration", func(m map[string]types.AttributeValue) { delete(m, "leaseDuration") }},
		{"leaseDuration", func(m map[string]types.AttributeValue) { m["leaseDuration"] = S("soon") }},
		{"leaseDuration", func(m map[string]types.AttributeValue) { m["leaseDuration"] = S("-5") }},
		{"isReleased", func(m map[string]types.AttributeValue) { m["isReleased"] = S("true") }},
		{"fence", func(m map[string]types.AttributeValue) { m["fence"] = S("12") }},
	}
	for i, tc := range cases {
		key := name(t) + "-" + itoa(uint64(i))
		item := good()
		tc.edit(item)
		item["key"] = S(key)
		if _, err := dc.PutItem(ctx, &ddb.PutItemInput{TableName: &table, Item: item}); err != nil {
			t.Fatal(err)
		}
		_, err := c.TryAcquire(ctx, key, nil)
		if err == nil || errors.Is(err, fencelock.ErrNotAcquired) || !strings.Contains(err.Error(), `"`+tc.attr+`"`) {
			t.Errorf("case %d: TryAcquire of an item with bad %s: %v; want an error naming the attribute", i, tc.attr, err)
		}
		// Its leaseDuration (where readable) is 100ms: wait far longer.
		_, err = c.Acquire(ctx, key, &fencelock.AcquireOptions{Wait: 500 * time.Millisecond})
		if err == nil || errors.Is(err, fencelock.ErrNotAcquired) {
			t.Errorf("case %d: Acquire of an item with bad %s: %v; want the attribute error", i, tc.attr, err)
		}
		out, gerr := dc.GetItem(ctx, &ddb.GetItemInput{TableName: &table, ConsistentRead: new(true), Key: map[string]types.AttributeValue{"key": S(key)}})
		if gerr != nil || len(out.Item) != len(item) {
			t.Errorf("case %d: the foreign item was changed: %v %v", i, out.Item, gerr)
		}
	}
}

// TestGoDurationLease: cirello-io/dynamolock writes leaseDuration as a Go
// duration ("300ms"); fencelock honours it like the milliseconds form.
func TestGoDurationLease(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	c := open(t, d.URL(), nil)
	table := tableOf(t, d.URL())
	key := name(t)
	S := attrS
	item := map[string]types.AttributeValue{"key": S(key), "ownerName": S("go-client"), "recordVersionNumber": S("v1"), "leaseDuration": S("300ms")}
	if _, err := native(t, c).PutItem(ctx, &ddb.PutItemInput{TableName: &table, Item: item}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := c.Acquire(ctx, key, &fencelock.AcquireOptions{Wait: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("took over a 300ms lease after %v", took)
	}
}

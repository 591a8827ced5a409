package redis_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestDerivedKeysAreNotLockKeys: with no prefix shielding the names, on a
// fresh server, the names that spell another name's fence, release channel
// or void key are independent locks: taking them neither fails nor touches
// the other name's fence counter, and plain names keep their exact key.
func TestDerivedKeysAreNotLockKeys(t *testing.T) {
	r := testserver.StartRedisProcess(t) // fresh: nothing else on it
	c := open(t, r.URL(), nil, nil)      // no Prefix
	rc := native(t, c)
	ctx := t.Context()
	o := &fencelock.AcquireOptions{TTL: 30 * time.Second}
	x, err := c.TryAcquire(ctx, "x", o)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Get(ctx, "x").Val() == "" {
		t.Fatal(`plain name "x" is not locked under the key "x" (interop with redis-py/redsync)`)
	}
	fx := rc.Get(ctx, "{x}:fence").Val()
	for _, n := range []string{"{x}:fence", "{x}:released", "{x}:queue", "{x}:line:fencelock", "{x}:line", "{x}:waiters:fencelock", "{x}:waiters", "{x}:void:0123456789abcdef0123456789abcdef", "{x}:wait:0123456789abcdef0123456789abcdef", "{x}:fence:fencelock", "{x}:fencelock"} {
		l, err := c.TryAcquire(ctx, n, o)
		if err != nil {
			t.Fatalf("TryAcquire(%q) after \"x\" was used: %v", n, err)
		}
		if got := rc.Get(ctx, "{x}:fence").Val(); got != fx {
			t.Fatalf("the fence key of \"x\" changed from %s to %s when %q was acquired", fx, got, n)
		}
		if l.Fence() == 0 {
			t.Fatalf("%q: fence 0", n)
		}
		defer l.Release(ctx)
	}
	// The fence of "x" still counts on: a new grant of "x" is above the old.
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	x2, err := c.TryAcquire(ctx, "x", o)
	if err != nil {
		t.Fatal(err)
	}
	defer x2.Release(ctx)
	if x2.Fence() <= x.Fence() {
		t.Fatalf("fence of \"x\" went from %d to %d", x.Fence(), x2.Fence())
	}
	// And the reverse order: a reserved name first, then the name whose
	// derived key it spells.
	y, err := c.TryAcquire(ctx, "{y}:fence", o)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Release(ctx)
	y2, err := c.TryAcquire(ctx, "y", o)
	if err != nil {
		t.Fatalf(`TryAcquire("y") while "{y}:fence" is held: %v`, err)
	}
	defer y2.Release(ctx)
}

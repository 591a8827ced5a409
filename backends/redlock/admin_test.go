package redlock_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// TestFenceRisesAfterDropFenceState: fences keep rising across grants
// made right after the fence keys were deleted on every primary
// (FenceAdmin.DropFenceState), however soon after the last grant: the
// time floor alone must put each above the last. And StoredFence covers
// every fence granted.
func TestFenceRisesAfterDropFenceState(t *testing.T) {
	m := nodes(t, 3, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	adm, err := adminOf(c)
	if err != nil {
		t.Fatal(err)
	}
	fa := adm.(driver.FenceAdmin)
	n := name(t)
	var last fencelock.Fence
	for round := range 200 {
		l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if l.Fence() <= last {
			t.Fatalf("round %d: fence %d after %d, granted after the fence state was dropped", round, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if round%10 == 0 {
			stored, ok, err := fa.StoredFence(ctx, n)
			if err != nil || !ok || stored < last {
				t.Fatalf("round %d: StoredFence = %d, %v, %v after fence %d", round, stored, ok, err, last)
			}
		}
		if err := fa.DropFenceState(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
}

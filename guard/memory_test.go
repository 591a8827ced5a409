package guard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/guard"
)

// The seed's overlap: A (fence 33) reads, stalls; B (fence 34) reads and
// works; A writes; B writes. Write-only loses A's or B's increment;
// claim-first rejects A and loses nothing.
func TestCounterOverlap(t *testing.T) {
	ctx := context.Background()
	t.Run("write-only loses an update", func(t *testing.T) {
		var c guard.Counter
		a, _ := c.Read(ctx)
		b, _ := c.Read(ctx)
		if err := c.WriteIfNotOlder(ctx, 33, a+1); err != nil {
			t.Fatalf("A's write: %v", err)
		}
		if err := c.WriteIfNotOlder(ctx, 34, b+1); err != nil {
			t.Fatalf("B's write: %v", err)
		}
		if v, _ := c.Read(ctx); v != 1 {
			t.Fatalf("value %d, want 1 (one of two increments lost)", v)
		}
		if err := c.WriteIfNotOlder(ctx, 33, 7); !errors.Is(err, guard.ErrStale) {
			t.Fatalf("older write after a newer one: %v, want ErrStale", err)
		}
	})
	t.Run("claim-first rejects the stale holder", func(t *testing.T) {
		var c guard.Counter
		a, err := c.Claim(ctx, 33)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Claim(ctx, 34)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteClaimed(ctx, 33, a+1); !errors.Is(err, guard.ErrStale) {
			t.Fatalf("A's stale write: %v, want ErrStale", err)
		}
		if err := c.WriteClaimed(ctx, 34, b+1); err != nil {
			t.Fatalf("B's write: %v", err)
		}
		if _, err := c.Claim(ctx, 34); !errors.Is(err, guard.ErrStale) {
			t.Fatalf("re-claim with the same fence: %v, want ErrStale", err)
		}
		if v, _ := c.Read(ctx); v != 1 || c.Fence() != 34 {
			t.Fatalf("value %d fence %d, want 1 and 34", v, c.Fence())
		}
	})
}

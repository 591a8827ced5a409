package fencelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/driver"
)

// capsOf is the mem:// driver with other Capabilities.
type capsOf struct {
	driver.Backend
	caps driver.Capabilities
}

func (c capsOf) Capabilities() driver.Capabilities { return c.caps }
func (c capsOf) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	return c.Backend.(driver.Inspector).Inspect(ctx, name)
}

// TestInspectAndLabels: Inspect reports the label the lease was acquired
// with (the default: host/pid), SetLabel changes it in place, and a free
// lock reads as free with no holder fields.
func TestInspectAndLabels(t *testing.T) {
	ctx := t.Context()
	c := memClient(t, nil, &fencelock.Options{Prefix: "p/"})
	defer c.Close()
	l, err := c.TryAcquire(ctx, "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, "job")
	if err != nil || !info.Held || info.Label != fencelock.DefaultLabel() || info.Fence != l.Fence() || info.Remaining <= 0 || info.Waiters != -1 || info.Name != "job" {
		t.Fatalf("Inspect: %+v, %v; want held by %q with fence %d", info, err, fencelock.DefaultLabel(), l.Fence())
	}
	if !strings.Contains(l.Label(), "/") {
		t.Fatalf("default label %q: want host/pid", l.Label())
	}
	if err := l.SetLabel(ctx, "renamed"); err != nil {
		t.Fatal(err)
	}
	if info, _ = c.Inspect(ctx, "job"); info.Label != "renamed" || l.Label() != "renamed" {
		t.Fatalf("after SetLabel: %+v, Label %q", info, l.Label())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ = c.Inspect(ctx, "job"); info.Held || info.Label != "" || info.Fence != 0 || info.Remaining != 0 {
		t.Fatalf("after Release: %+v, want free with no holder fields", info)
	}
	if err := l.SetLabel(ctx, "late"); !errors.Is(err, fencelock.ErrReleased) {
		t.Fatalf("SetLabel after Release: %v, want ErrReleased", err)
	}
	for _, bad := range []string{strings.Repeat("x", fencelock.MaxLabelLen+1), "a\x00b", "\xff"} {
		if _, err := c.TryAcquire(ctx, "job", &fencelock.AcquireOptions{Label: bad}); !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("TryAcquire with label %q: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := c.Inspect(ctx, ""); !errors.Is(err, fencelock.ErrInvalid) {
		t.Errorf("Inspect of an empty name: %v", err)
	}
}

// TestInspectDeclarations: a backend that declares no Inspect is
// errors.ErrUnsupported; MaxLabel and LabelASCII refuse labels the store
// could not keep, and cut the default label to fit; Waiters is -1 unless
// declared.
func TestInspectDeclarations(t *testing.T) {
	ctx := t.Context()
	caps := memory.NewDriver(nil).Capabilities()
	caps.Inspect = driver.InspectCaps{}
	none := fencelock.New(capsOf{memory.NewDriver(nil), caps}, nil)
	defer none.Close()
	if _, err := none.Inspect(ctx, "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Inspect on a backend without it: %v", err)
	}
	l, err := none.TryAcquire(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetLabel(ctx, "y"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("SetLabel on a backend without Relabel: %v", err)
	}
	_ = l.Release(ctx)

	caps = memory.NewDriver(nil).Capabilities()
	caps.Inspect.MaxLabel, caps.Inspect.LabelASCII = 4, true
	small := fencelock.New(capsOf{memory.NewDriver(nil), caps}, nil)
	defer small.Close()
	for _, bad := range []string{"12345", "✓"} {
		if _, err := small.TryAcquire(ctx, "x", &fencelock.AcquireOptions{Label: bad}); !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("label %q on a 4-byte ASCII backend: %v, want ErrInvalid", bad, err)
		}
	}
	l, err = small.TryAcquire(ctx, "x", nil)
	if err != nil {
		t.Fatalf("default label on a 4-byte backend: %v", err)
	}
	defer l.Release(ctx)
	if d := fencelock.DefaultLabel(); len(l.Label()) > 4 || !strings.HasSuffix(d, l.Label()) {
		t.Fatalf("default label cut to %q, want the last 4 bytes of %q", l.Label(), d)
	}
}

// TestAbandon: an abandoned lease ends with ErrLeaseLost at once, sends
// no release (the lock stays held until its TTL), and Release afterwards
// touches nothing.
func TestAbandon(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := memory.NewStore()
	c := memClient(t, s, nil)
	defer c.Close()
	const ttl = 300 * time.Millisecond
	l, err := c.TryAcquire(ctx, "x", &fencelock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	l.Abandon()
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err after Abandon: %v", l.Err())
	}
	if _, _, held := s.Holder("x"); !held {
		t.Fatal("Abandon released the lock")
	}
	if err := l.Release(ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Release after Abandon: %v", err)
	}
	if _, _, held := s.Holder("x"); !held {
		t.Fatal("Release after Abandon released the lock")
	}
	start := time.Now()
	l2, err := c.Acquire(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if waited := time.Since(start); waited < ttl/2 {
		t.Fatalf("granted %v after Abandon, before the %v TTL ran out", waited, ttl)
	}
}

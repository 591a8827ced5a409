package fencelock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/driver"
)

// Regression: Extend to a shorter TTL must move the local deadline earlier.
// Before the fix ValidUntil stayed at the old, later deadline, and a second
// client was granted the lock while the first still reported it held.
func TestExtendShorterTTLMovesDeadlineEarlier(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	a, b := memClient(t, s, nil), memClient(t, s, nil)
	defer a.Close()
	defer b.Close()
	l, err := a.TryAcquire(ctx, "x", &fencelock.AcquireOptions{TTL: 5 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	const short = 100 * time.Millisecond
	sent := time.Now()
	if err := l.Extend(ctx, short); err != nil {
		t.Fatal(err)
	}
	if vu := l.ValidUntil(); vu.After(time.Now().Add(short)) || vu.Before(sent) {
		t.Fatalf("after Extend(%v) ValidUntil is %v from now; want at most %v", short, time.Until(vu), short)
	}
	l2, err := b.Acquire(ctx, "x", &fencelock.AcquireOptions{TTL: time.Minute, Wait: 5 * time.Second})
	granted := time.Now()
	if err != nil {
		t.Fatalf("Acquire after the shortened lease ran out: %v", err)
	}
	defer l2.Release(ctx)
	if vu := l.ValidUntil(); granted.Before(vu) {
		t.Fatalf("second holder granted %v before the first lease's ValidUntil: two holders", vu.Sub(granted))
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("shortened lease did not end")
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after %d", l2.Fence(), l.Fence())
	}
}

// Regression: while an Extend to a shorter TTL is in flight, ValidUntil
// is already no later than its send time plus that TTL. Before the fix it
// moved only at the reply: a holder paused between the store's applying
// the shorter TTL and the reply (SIGSTOP of the client process in the
// torture) believed past the store, which had granted the lock to another.
func TestExtendShorterTTLMovesDeadlineWhileInFlight(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	g := &replyGated{Backend: memory.NewDriver(s), gate: make(chan struct{}), applied: make(chan struct{})}
	a := fencelock.New(g, nil)
	defer a.Close()
	l, err := a.TryAcquire(ctx, "x", &fencelock.AcquireOptions{TTL: 5 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	const short = 100 * time.Millisecond
	sent := time.Now()
	done := make(chan error, 1)
	go func() { done <- l.Extend(ctx, short) }()
	<-g.applied // the store keeps the lock until about sent+short now
	if vu := l.ValidUntil(); vu.After(sent.Add(short)) {
		t.Errorf("with Extend(%v) applied by the store and its reply pending, ValidUntil is %v after the send, want at most %v", short, vu.Sub(sent), short)
	}
	close(g.gate)
	if err := <-done; err != nil && !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Extend: %v", err)
	}
}

// replyGated is the mem:// driver with an Extend whose reply waits, after
// the store applied it, until the gate opens.
type replyGated struct {
	driver.Backend
	gate, applied chan struct{}
}

type replyGatedLease struct {
	driver.Lease
	b *replyGated
}

func (g *replyGated) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, err := g.Backend.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &replyGatedLease{Lease: l, b: g}, nil
}

func (l *replyGatedLease) Extend(ctx context.Context, ttl time.Duration) error {
	err := l.Lease.Extend(ctx, ttl)
	close(l.b.applied)
	<-l.b.gate
	return err
}

// gated is the mem:// driver with an Extend that blocks, ignoring its ctx,
// until the gate opens: a store operation slow to honour cancellation.
type gated struct {
	driver.Backend
	gate    chan struct{}
	entered chan struct{}
	once    sync.Once
}

type gatedLease struct {
	driver.Lease
	b *gated
}

func (g *gated) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, err := g.Backend.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &gatedLease{Lease: l, b: g}, nil
}

func (l *gatedLease) Extend(ctx context.Context, ttl time.Duration) error {
	l.b.once.Do(func() { close(l.b.entered) })
	<-l.b.gate
	return l.Lease.Extend(ctx, ttl)
}

// Regression: Extend and Release waited out a renewal in flight, ignoring
// their ctx (a 100 ms ctx returned after 1.9 s).
func TestExtendAndReleaseHonourCtxWhileStoreOpInFlight(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	g := &gated{Backend: memory.NewDriver(s), gate: make(chan struct{}), entered: make(chan struct{})}
	a := fencelock.New(g, nil)
	b := memClient(t, s, nil)
	defer a.Close()
	defer b.Close()
	l, err := a.TryAcquire(ctx, "x", &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- l.Extend(ctx, 0) }()
	<-g.entered

	const d = 100 * time.Millisecond
	for _, call := range []struct {
		what string
		f    func(context.Context) error
	}{
		{"Extend", func(c context.Context) error { return l.Extend(c, 0) }},
		{"Release", l.Release},
	} {
		cctx, cancel := context.WithTimeout(ctx, d)
		start := time.Now()
		err := call.f(cctx)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s with a %v ctx during a store operation in flight: %v, want DeadlineExceeded", call.what, d, err)
		}
		if took > d+2*time.Second {
			t.Fatalf("%s with a %v ctx returned after %v", call.what, d, took)
		}
	}
	if !errors.Is(l.Err(), fencelock.ErrReleased) {
		t.Fatalf("after an interrupted Release, Err = %v, want ErrReleased", l.Err())
	}
	// The store side is freed once the slow operation returns.
	close(g.gate)
	<-first
	l2, err := b.Acquire(ctx, "x", &fencelock.AcquireOptions{TTL: time.Minute, Wait: 10 * time.Second})
	if err != nil {
		t.Fatalf("lock not freed after the interrupted Release: %v", err)
	}
	_ = l2.Release(ctx)
}

// stuck is a driver whose Release blocks until its ctx ends: a store that
// stopped answering.
type stuck struct{ driver.Backend }
type stuckLease struct{ driver.Lease }

func (s stuck) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, err := s.Backend.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return stuckLease{l}, nil
}

func (stuckLease) Release(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// Regression: Close released leases one at a time, each bounded by
// ReleaseTimeout: 10,000 leases on an unresponsive store took hours.
func TestCloseReleasesInParallelUnderOneBound(t *testing.T) {
	ctx := context.Background()
	const n, rt = 200, 200 * time.Millisecond
	c := fencelock.New(stuck{memory.NewDriver(nil)}, &fencelock.Options{ReleaseTimeout: rt})
	ls := make([]*fencelock.Lease, n)
	for i := range ls {
		l, err := c.TryAcquire(ctx, "n"+string(rune('a'+i%26))+time.Duration(i).String(), &fencelock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// One at a time this takes n×rt = 40 s; in parallel, about rt.
	if took := time.Since(start); took > rt+5*time.Second {
		t.Fatalf("Close of %d leases on an unresponsive store took %v (ReleaseTimeout %v)", n, took, rt)
	}
	for _, l := range ls {
		if !errors.Is(l.Err(), fencelock.ErrClosed) {
			t.Fatalf("lease %s: Err = %v after Close, want ErrClosed", l.Name(), l.Err())
		}
	}
}

// grantsMore reports a store TTL above the one requested.
type grantsMore struct{ driver.Backend }
type grantsMoreLease struct{ driver.Lease }

func (g grantsMore) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, err := g.Backend.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return grantsMoreLease{l}, nil
}

func (grantsMoreLease) GrantedTTL() time.Duration { return 2 * time.Second }

func TestStoreTTL(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		b    driver.Backend
		want time.Duration
	}{
		{memory.NewDriver(nil), time.Second},
		{grantsMore{memory.NewDriver(nil)}, 2 * time.Second},
	} {
		c := fencelock.New(tc.b, nil)
		l, err := c.TryAcquire(ctx, "x", &fencelock.AcquireOptions{TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if got := l.StoreTTL(); got != tc.want {
			t.Errorf("StoreTTL = %v, want %v", got, tc.want)
		}
		if vu := time.Until(l.ValidUntil()); vu > time.Second {
			t.Errorf("ValidUntil %v away: must come from the requested TTL, not the granted one", vu)
		}
		c.Close()
	}
}

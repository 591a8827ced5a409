package redis_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redis"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTortureMutantsRedis: the torture checker catches deliberate defects
// wrapped around the real Redis driver (as conformance/torture_test.go
// does around mem://): a double grant once in 500 refused attempts, and
// a blocked Acquire that is never woken. The same run without a defect
// passes.
func TestTortureMutantsRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	r := testserver.StartRedis(t)
	for _, m := range []struct{ mutant, check string }{{"", ""}, {"DoubleGrant", "overlap"}, {"NeverWakes", "liveness"}} {
		h := &mutantRedis{addr: r.Addr(), mutant: m.mutant, rng: rand.New(rand.NewPCG(24, 99)), last: map[string]driver.Fence{}}
		res, err := conformance.Torture(t.Context(), h, conformance.TortureOptions{Duration: 8 * time.Second, Seed: 24})
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		caught := time.Duration(-1)
		for _, v := range res.Violations {
			if v.Check == m.check && (caught < 0 || v.To < caught) {
				caught = v.To
			}
		}
		switch {
		case m.mutant == "" && len(res.Violations) > 0:
			t.Errorf("the unmutated Redis driver broke the contract: %v", res.Violations)
		case m.mutant != "" && caught < 0:
			t.Errorf("mutant %s not caught by the %s check (%d ops): %v", m.mutant, m.check, res.Ops(), res.Violations)
		case m.mutant != "":
			t.Logf("mutant %s caught by the %s check at %v of the run (%d ops, %d violations)", m.mutant, m.check, caught.Round(time.Millisecond), res.Ops(), len(res.Violations))
		}
	}
}

// mutantRedis makes Clients over the real Redis driver with a defect.
type mutantRedis struct {
	addr, mutant string

	mu      sync.Mutex
	rng     *rand.Rand
	last    map[string]driver.Fence // each key's last fence granted
	clients []*goredis.Client
}

func (h *mutantRedis) MakeClient(_ context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	gc := goredis.NewClient(&goredis.Options{Addr: h.addr})
	h.mu.Lock()
	h.clients = append(h.clients, gc)
	h.mu.Unlock()
	inner := redis.NewDriver(gc)
	var b driver.Backend = &mutantRedisBackend{Backend: inner, h: h}
	if h.mutant == "NeverWakes" {
		b = &deafRedis{b.(*mutantRedisBackend)}
	} else {
		b = &blockingRedis{b.(*mutantRedisBackend), inner.(driver.Blocker)}
	}
	return fencelock.New(b, opts), nil
}

func (h *mutantRedis) URL() string { return "" }

func (h *mutantRedis) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.clients {
		_ = c.Close()
	}
	h.clients = nil
}

type mutantRedisBackend struct {
	driver.Backend
	h *mutantRedis
}

func (b *mutantRedisBackend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, err := b.Backend.TryAcquire(ctx, req)
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.last[req.Name] = max(h.last[req.Name], l.Fence())
	}
	if errors.Is(err, driver.ErrNotAcquired) && h.mutant == "DoubleGrant" && h.rng.IntN(500) == 0 {
		h.last[req.Name]++
		return &ghost{fence: h.last[req.Name]}, nil
	}
	return l, err
}

// blockingRedis keeps the driver's own blocking Acquire (its waiter
// line) for the unmutated and DoubleGrant runs.
type blockingRedis struct {
	*mutantRedisBackend
	bl driver.Blocker
}

func (b *blockingRedis) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	l, sent, err := b.bl.Acquire(ctx, req)
	if err == nil {
		b.h.mu.Lock()
		b.h.last[req.Name] = max(b.h.last[req.Name], l.Fence())
		b.h.mu.Unlock()
	}
	return l, sent, err
}

// deafRedis: a blocked Acquire tries once, then waits for its ctx.
type deafRedis struct{ *mutantRedisBackend }

func (b *deafRedis) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	sent := time.Now()
	l, err := b.TryAcquire(ctx, req)
	if !errors.Is(err, driver.ErrNotAcquired) {
		return l, sent, err
	}
	<-ctx.Done()
	return nil, sent, ctx.Err()
}

// ghost is a second grant of a held lock: it holds nothing.
type ghost struct{ fence driver.Fence }

func (g *ghost) Fence() driver.Fence                         { return g.fence }
func (g *ghost) Extend(context.Context, time.Duration) error { return nil }
func (g *ghost) Release(context.Context) error               { return nil }

package pgadvisory_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestHoldManyLeases: a held lease is a connection in a transaction, so a
// Client holds at most its pool's size — here 100 leases, renewed through
// three TTLs, add O(1) goroutines (one connection watcher per Client; loss
// is signalled by callback), and the next acquire fails at once with an
// error that says the pool is exhausted instead of waiting forever.
func TestHoldManyLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: holds 100 leases on a server of its own for 19 s")
	}
	pg := testserver.StartPostgres(t) // 100 connections: not on the shared server
	e := newEnvURL(t, pg.URL())
	const n, ttl = 100, 6 * time.Second
	var logs syncBuffer // renewal failures and losses, shown on failure
	c, err := fencelock.DefaultURLMux().Open(e.ctx, e.url+"&pool_max_conns=100&conn_timeout=20s", &fencelock.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Renewals come in bursts every TTL/3; end the hold between two.
	r, err := conformance.HoldMany(e.ctx, c, e.name(), n, ttl, 3*ttl+ttl/6)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if err := r.Check(50); err != nil {
		t.Errorf("%v; the Client logged:\n%s", err, logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPoolExhaustionIsClear: with every pool connection holding a lease,
// TryAcquire returns ErrUnavailable naming the exhausted pool within
// conn_timeout, even under a context without a deadline.
func TestPoolExhaustionIsClear(t *testing.T) {
	e := newEnv(t)
	c := e.client("pool_max_conns=3&conn_timeout=300ms")
	for i := range 3 {
		if _, err := c.TryAcquire(e.ctx, e.name(), opts(30*time.Second, false)); err != nil {
			t.Fatalf("lease %d of 3: %v", i, err)
		}
	}
	start := time.Now()
	_, err := c.TryAcquire(t.Context(), e.name(), nil)
	took := time.Since(start)
	if !errors.Is(err, fencelock.ErrUnavailable) || !strings.Contains(err.Error(), "pool") {
		t.Fatalf("TryAcquire with every connection holding a lease = %v, want ErrUnavailable naming the pool", err)
	}
	if took > 5*time.Second {
		t.Errorf("TryAcquire took %v to report the exhausted pool, want about conn_timeout (300ms)", took)
	}
	t.Logf("%v after %v", err, took.Round(time.Millisecond))
}

package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// A port nobody listens on fails with ErrUnavailable as fast as a refused
// dial allows: one dial per command attempt, not go-redis's default five
// dials 100 ms apart (which took 1.7 s).
func TestRefusedFailsFast(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := fencelock.Open(ctx, "redis://"+testserver.Addr(port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.TryAcquire(ctx, "refused", nil)
	took := time.Since(start)
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("TryAcquire on a refused port: %v, want ErrUnavailable", err)
	}
	// Four refused dials and go-redis's retry backoffs (8–512 ms, jittered)
	// take ~0.1 s; the default dialer retries alone took 1.7 s.
	if took > time.Second {
		t.Fatalf("TryAcquire on a refused port took %v, want under 1s", took)
	}
}

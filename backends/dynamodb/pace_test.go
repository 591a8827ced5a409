package dynamodb_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestBurstWaitsOutsideRequestTimeout: a burst of renewals far larger
// than the connection pool (64) all succeed with a short per-request
// timeout: they wait for their turn in the Client's window, on their own
// ctx, and the HTTP timeout starts only when each is sent. Without the
// window they queued for a connection inside the timeout, and those at
// the back failed with "context deadline exceeded (Client.Timeout
// exceeded while awaiting headers)".
func TestBurstWaitsOutsideRequestTimeout(t *testing.T) {
	d := testserver.StartDynalite(t)
	c := open(t, d.URL()+"&request_timeout=1s", nil)
	const n = 1500
	key := name(t)
	ls := make([]*fencelock.Lease, n)
	for i := range ls {
		l, err := c.TryAcquire(t.Context(), key+"-"+itoa(uint64(i)), noRenew)
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	defer func() {
		for _, l := range ls {
			_ = l.Release(context.WithoutCancel(t.Context()))
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for _, l := range ls {
		wg.Go(func() {
			if err := l.Extend(t.Context(), 30*time.Second); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if failed++; failed == 1 {
			t.Errorf("a renewal of the burst failed: %v", err)
		}
	}
	t.Logf("%d renewals at once: %d failed, all done in %v", n, failed, time.Since(start))
}

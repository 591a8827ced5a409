package dynamodb_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestOnePollerPerClient: the blocked Acquires of one Client on one lock
// cost the table the requests of one waiter: only the first polls, the
// others wait their turn in the Client. Four waiters of one Client, while
// another Client holds the lock, send about what one waiter sends in the
// same time (each waiter polling for itself sent 2.5–4 times as much).
func TestOnePollerPerClient(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	w := newWire()
	c := openWire(t, d.URL(), w, 3)
	holder := open(t, d.URL(), nil)
	n := name(t)
	l, err := holder.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(context.WithoutCancel(ctx)) }()
	requests := func(waiters int) int {
		w.take()
		wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		for range waiters {
			wg.Go(func() {
				_, err := c.Acquire(wctx, n, &fencelock.AcquireOptions{TTL: 5 * time.Second})
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Acquire of a held lock: %v, want the deadline", err)
				}
			})
		}
		wg.Wait()
		total := 0
		for _, k := range w.take() {
			total += k
		}
		return total
	}
	one := requests(1)
	four := requests(4)
	t.Logf("requests in 1.5 s: one waiter %d, four waiters of the same Client %d", one, four)
	if one == 0 || four > one+one/2+4 {
		t.Errorf("four waiters of one Client sent %d requests in 1.5 s, one waiter %d: want about one waiter's", four, one)
	}
}

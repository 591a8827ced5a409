package redlock_test

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redlock"
)

// TestWaitersGrantedInArrivalOrder: blocked Acquires of different Clients
// queue on the lead primary in the order they first found the lock held,
// and each release goes to the first in line, not to whichever waiter
// wins the race for the primaries' votes.
func TestWaitersGrantedInArrivalOrder(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	n := name(t)
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second}
	cs := []*fencelock.Client{open(t, m.URL(), nil)}
	held, err := cs[0].TryAcquire(ctx, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 6
	var (
		mu    sync.Mutex
		order []int
	)
	done := make(chan error, waiters)
	for i := range waiters {
		c := open(t, m.URL(), nil)
		cs = append(cs, c)
		go func() {
			l, err := c.Acquire(ctx, n, opts)
			if err == nil {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				err = l.Release(ctx)
			}
			done <- err
		}()
		// The next waiter starts once this one is queued on the lead and
		// has asked again (its deadline there moved): its first attempt,
		// a plain fan-out that the queue does not order, is over.
		tick := time.NewTicker(time.Millisecond)
		var id, first string
		for {
			if id == "" {
				ids, err := m.Nodes[0].Do(ctx, "ZRANGE", redlock.QueueKey(n), strconv.Itoa(i), strconv.Itoa(i))
				if err != nil {
					t.Fatal(err)
				}
				if l, _ := ids.([]any); len(l) == 1 {
					id = l[0].(string)
				}
			}
			if id != "" {
				dl, err := m.Nodes[0].Do(ctx, "HGET", redlock.QueueDeadlinesKey(n), id)
				if err != nil {
					t.Fatal(err)
				}
				if first == "" {
					first = dl.(string)
				} else if dl.(string) != first {
					break
				}
			}
			select {
			case <-tick.C:
			case err := <-done:
				t.Fatalf("waiter %d ended while the lock was held: %v", i, err)
			}
		}
		tick.Stop()
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5}; !slices.Equal(order, want) {
		t.Fatalf("waiters granted in the order %v, want their arrival order %v", order, want)
	}
	for _, c := range cs {
		redlock.Idle(c) // the releases' calls to the lead may still be on their way
	}
	v, err := m.Nodes[0].Do(ctx, "EXISTS", redlock.QueueKey(n))
	if err != nil || v != int64(0) {
		t.Fatalf("queue left on the lead after every waiter was granted: EXISTS = %v, %v", v, err)
	}
}

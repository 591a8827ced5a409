package redlock_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// TestExpiryWakesWaiterBehindQueuedHolder: a holder that got the lock by
// a blocked Acquire's ordered attempt heads the lead primary's queue;
// when it stops renewing (a stall, a crash), the other Client's waiter
// is granted within the declared ExpiryWake (with the conformance
// suite's 250ms tolerance) of the holder's keys running out: the
// holder's place in the queue ends with its lock key, and the waiter
// retries at the PTTL the primaries returned, not at its next backoff.
// The Clients' Options.Backoff is a minute: only the backend wakes them.
func TestExpiryWakesWaiterBehindQueuedHolder(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	bo := &fencelock.Options{Backoff: func(int) time.Duration { return time.Minute }}
	cs := []*fencelock.Client{open(t, m.URL(), bo), open(t, m.URL(), bo)}
	n := name(t)
	const ttl = 100 * time.Millisecond
	bound := cs[0].Capabilities().ExpiryWake + 250*time.Millisecond
	opts := &fencelock.AcquireOptions{TTL: ttl, AutoRenew: fencelock.Bool(false)}
	// Each round, the last round's waiter holds (granted after a wait, so
	// by an ordered attempt: it heads the lead's queue) and abandons the
	// lock; the other Client waits for it.
	l, err := cs[0].Acquire(ctx, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	for round := 1; round <= 6; round++ {
		next, err := cs[round%2].Acquire(ctx, n, opts)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		late := time.Since(granted.Add(ttl))
		if next.Fence() <= l.Fence() {
			t.Fatalf("round %d: fence %d after %d", round, next.Fence(), l.Fence())
		}
		if late > bound {
			t.Fatalf("round %d: the waiter was granted %v after the abandoned holder's TTL ran out: over ExpiryWake + tolerance (%v)", round, late.Round(time.Millisecond), bound)
		}
		t.Logf("round %d: granted %v after the abandoned holder's TTL ran out", round, late.Round(time.Millisecond))
		l, granted = next, time.Now()
	}
}

package conformance

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

func mustIs(t TB, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one matching %v", what, err, target)
	}
}

func mustNil(t TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// opts builds AcquireOptions.
func opts(ttl time.Duration, renew bool) *fencelock.AcquireOptions {
	return &fencelock.AcquireOptions{TTL: ttl, AutoRenew: fencelock.Bool(renew)}
}

// waitDone waits for l to end, at most d; reports whether it ended.
func waitDone(l *fencelock.Lease, d time.Duration) bool {
	select {
	case <-l.Done():
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.Done():
		return true
	case <-t.C:
		return false
	}
}

// checkFence asserts next is greater than prev.
func (e *env) checkFence(t TB, prev, next fencelock.Fence, what string) {
	t.Helper()
	if next <= prev {
		t.Fatalf("%s: fence %d is not greater than the earlier %d", what, next, prev)
	}
	if next.Int64() <= 0 {
		t.Fatalf("%s: fence %d does not fit a positive int64", what, next)
	}
}

// errList collects errors from worker goroutines without ever blocking
// them (a worker must never wait on a full channel while holding a lock).
type errList struct {
	mu   sync.Mutex
	n    int
	errs []error // the first few
}

func (l *errList) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if len(l.errs) < 8 {
		l.errs = append(l.errs, err)
	}
}

func (l *errList) addf(f string, a ...any) { l.add(fmt.Errorf(f, a...)) }

// report fails t with every error collected (the first few in full).
func (l *errList) report(t TB, what string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		t.Errorf("%s: %v", what, err)
	}
	if l.n > len(l.errs) {
		t.Errorf("%s: and %d more errors", what, l.n-len(l.errs))
	}
}

// promiseTol is the slack the suite gives a declared timing bound (a
// Capabilities field such as ExpiryWake) on a loaded machine: the larger
// of 250ms and half the bound. It is far below the defects the bounds
// exist to catch (a waiter woken by a 1 s refresh instead of the store's
// notice, a missed expiry found 300 ms late).
func promiseTol(bound time.Duration) time.Duration { return max(250*time.Millisecond, bound/2) }

package zookeeper_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// TestLongTTLBoundedBySession: a lease extended to a TTL longer than its
// session's timeout keeps a ValidUntil at most one session timeout past
// the renewal's send, since the server deletes the node that long after it
// last heard from a frozen holder (found by the torture's freeze-client
// fault: a child frozen after an Extend to 2 s on a 1 s session believed
// it held 572 ms after another client was granted the name).
func TestLongTTLBoundedBySession(t *testing.T) {
	c := open(t, sharedURL(t), nil)
	session := c.Capabilities().MinTTL // the server's minimum session timeout
	l, err := c.TryAcquire(t.Context(), name(t), &fencelock.AcquireOptions{TTL: session, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	if got := l.StoreTTL(); got != session {
		t.Fatalf("StoreTTL %v: want the session timeout %v negotiated for TTL %v", got, session, session)
	}
	before := time.Now()
	if err := l.Extend(t.Context(), 3*session); err != nil {
		t.Fatal(err)
	}
	if vu := l.ValidUntil(); vu.After(before.Add(session)) {
		t.Fatalf("after Extend(%v) on a %v session, ValidUntil is %v past the send; want at most the session timeout", 3*session, session, vu.Sub(before))
	}
}

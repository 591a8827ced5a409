package conformance

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
)

// Harness gives the suite access to one lock store. The suite makes a fresh
// harness per check (HarnessMaker) and closes it after.
type Harness interface {
	// MakeClient returns a new Client on the store, independent of earlier
	// ones (its own connections, as another process would have). opts may be
	// nil; the harness may fill fields the suite leaves zero. The suite
	// closes the client.
	MakeClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, error)
	// URL returns a URL that opens the same store from another process
	// (the process-freeze check re-executes the test binary with it), or ""
	// if there is none (the check is then skipped and says why).
	URL() string
	// Close releases the harness's resources.
	Close()
}

// HarnessMaker makes a fresh Harness for one check.
type HarnessMaker func(ctx context.Context, t testing.TB) (Harness, error)

// Expirer is an optional Harness hook: make the store drop the lock with
// store key key at once, as if its TTL had passed (the holder is not told).
type Expirer interface {
	Expire(ctx context.Context, key string) error
}

// SessionKiller is an optional Harness hook: cut the store session or
// connections behind c, as a network fault or a server-side kill would, so
// that the store drops the leases held through c.
type SessionKiller interface {
	KillSession(ctx context.Context, c *fencelock.Client) error
}

// LeakFilter is an optional Harness hook for stores that run inside the
// test process (an embedded etcd, a served mem:// Store): the goroutines the
// store itself starts, for example to serve a client's connection, are not
// the client's leaks. NoGoroutineLeaks ignores what these options match.
type LeakFilter interface {
	IgnoreGoroutines() []goleak.Option
}

// PromptLoss is an optional Harness hook for a store that tells a holder at
// once when it drops the holder's lease (the backend's leases implement
// driver.LossNotifier for drops by Expirer.Expire). With it,
// StoreSideLossSignalled also demands that a lease with AutoRenew off and a
// long TTL, which no renewal could find lost, ends within the margin.
type PromptLoss interface {
	PromptLoss() bool
}

// RenewalStaller is an optional Harness hook for a harness that can make
// the store slow: StallExtends makes every store-side Extend (renewal) of
// leases held through c take d longer, until undo is called (undo may be
// called more than once). With it,
// ExtendToShorterTTL also checks that Extend and Release honour their ctx
// while a renewal is in flight.
type RenewalStaller interface {
	StallExtends(c *fencelock.Client, d time.Duration) (undo func())
}

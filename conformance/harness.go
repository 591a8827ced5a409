package conformance

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
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

// RenewalStaller is an optional Harness hook for a harness that can make
// the store slow: StallExtends makes every store-side Extend (renewal) of
// leases held through c take d longer, until undo is called (undo may be
// called more than once). With it,
// ExtendToShorterTTL also checks that Extend and Release honour their ctx
// while a renewal is in flight.
type RenewalStaller interface {
	StallExtends(c *fencelock.Client, d time.Duration) (undo func())
}

// Administered is an optional Harness hook: the backend's out-of-band
// admin operations (driver.Admin, with whichever of the optional admin
// hooks of package driver it also implements: FenceAdmin, QuorumAdmin,
// QueueAdmin, LoadAdmin). The URL harness returns the backend's own. The
// checks that a backend's declarations call for (a time-floored fence
// must survive the loss of its stored state, a FIFO queue must refuse a
// barging TryAcquire, ...) use them.
type Administered interface {
	Admin() driver.Admin
}

// Partitioner is an optional Harness hook: a new Client whose every
// connection to the store passes through fault proxies the check controls
// (one per store address, in the order the client's URL lists them), as
// ProxyURL makes them. The suite closes the client, then the Faults. The
// URL harness implements it for every backend whose URL opener implements
// fencelock.AddrRewriter; the partition checks need it.
type Partitioner interface {
	PartitionedClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, *Faults, error)
}

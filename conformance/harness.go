package conformance

import (
	"context"
	"testing"

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

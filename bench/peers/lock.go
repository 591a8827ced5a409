package peers

import (
	"context"
	"errors"
	"hash/fnv"
	"time"
)

// Unlock releases a lock that Try or Wait took.
type Unlock func(ctx context.Context) error

// Lock is one lock client (one connection, session or pool, like one
// process of a fleet) of one implementation.
type Lock interface {
	// Try makes one attempt to take key: ok is false, with a nil error,
	// when another owner holds it. It returns ErrNoTry when the library
	// has no non-blocking acquire.
	Try(ctx context.Context, key string) (unlock Unlock, ok bool, err error)
	// Wait blocks until key is held or ctx ends (then an error for which
	// errors.Is(err, ctx.Err()) holds, and nothing is left held).
	Wait(ctx context.Context, key string) (Unlock, error)
	// Close releases the client's connections.
	Close() error
}

// ErrNoTry: the library has no non-blocking acquire (go-zookeeper's
// zk.Lock); the uncontended measure then uses Wait.
var ErrNoTry = errors.New("peers: no non-blocking acquire")

// Impl is one lock implementation on one store.
type Impl struct {
	// ID is short and unique, e.g. "redis/redislock"; it names the keys.
	ID string
	// Store is the store kind: redis, redlock5, etcd, postgres,
	// zookeeper, dynamodb.
	Store string
	// Library is the Go module path of the lock library.
	Library string
	// Notes says how the library is configured and used.
	Notes string
	// Open opens one client.
	Open func(ctx context.Context) (Lock, error)
	// Server returns the PIDs of the store's server processes, whose CPU
	// time (with their children's) the contention measure counts; nil:
	// not measured.
	Server func() []int
}

// Floor is a store's cheapest round trip that a lock needs at least once:
// the physical floor an acquire+release is compared with.
type Floor struct {
	ID, Store, What string
	// Open returns the operation to time and a close function.
	Open func(ctx context.Context) (op func(ctx context.Context) error, close func(), err error)
}

// TTL is the lease TTL every implementation is given.
const TTL = 15 * time.Second

// ctxErr returns ctx's error if it has ended, else err.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// key64 maps a key to a Postgres advisory lock key.
func key64(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return int64(h.Sum64())
}

package redis_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redis"
)

// A lease on a Redis lock, with its fence sent along with the write it
// protects. (It needs a server, so it has no Output line: set REDIS_URL and
// run it as a program to see it work.)
func Example() {
	ctx := context.Background()
	rc := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rc.Close()
	locks, err := redis.New(rc, nil, &fencelock.Options{Prefix: "myapp:"})
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	lease, err := locks.Acquire(ctx, "nightly-report", &fencelock.AcquireOptions{TTL: 10 * time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// Do the work under lease.Context(): it is cancelled if the lease is
	// lost. Send lease.Fence() with every write; the resource refuses a
	// write whose fence is lower than one it has seen (package guard).
	fmt.Println("writing with fence", lease.Fence())
}

// Opening by URL: the blank import registers redis:// and rediss://.
func Example_open() {
	ctx := context.Background()
	url := os.Getenv("REDIS_URL") // e.g. redis://127.0.0.1:6379/0, or
	// redis://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000?cluster=true
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	locks, err := fencelock.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	lease, err := locks.TryAcquire(ctx, "orders:42", nil)
	if err != nil {
		log.Fatal(err) // errors.Is(err, fencelock.ErrNotAcquired) when held
	}
	defer lease.Release(ctx)
	fmt.Println("fence", lease.Fence())
}

// go-redis's own log lines (pool dial errors, which fencelock also
// returns) can be sent to a slog.Logger; fencelock leaves go-redis's
// process-wide logger alone unless asked.
func ExampleLogGoRedisTo() {
	redis.LogGoRedisTo(slog.Default())
}

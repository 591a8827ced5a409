package redlock_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redlock"
)

// A lease on five independent primaries, with its fence sent along with
// the write it protects. (It needs servers, so it has no Output line: run
// it as a program against your primaries to see it work.)
func Example() {
	ctx := context.Background()
	var primaries []*goredis.Client
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379"} {
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer c.Close()
		primaries = append(primaries, c)
	}
	locks, err := redlock.New(primaries, nil, &fencelock.Options{Prefix: "myapp:"})
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	lease, err := locks.Acquire(ctx, "nightly-report", &fencelock.AcquireOptions{TTL: 10 * time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err) // ErrUnavailable when no majority of primaries answers
	}
	defer lease.Release(ctx)

	// Do the work under lease.Context(): it is cancelled if the lease is
	// lost (a majority of primaries no longer holds it). Send lease.Fence()
	// with every write; the resource refuses a write whose fence is lower
	// than one it has seen (package guard).
	fmt.Println("writing with fence", lease.Fence())
}

// Opening by URL: the blank import registers redlock://.
func Example_open() {
	ctx := context.Background()
	url := os.Getenv("REDLOCK_URL") // e.g. redlock://h1:6379,h2:6379,h3:6379,h4:6379,h5:6379
	if url == "" {
		url = "redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"
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

package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	_ "github.com/fencelock/fencelock/backends/memory" // registers mem://
	"github.com/fencelock/fencelock/guard"
)

// Open a store by URL, take a lock, and pass the lease's fence to the
// resource with every write.
func Example() {
	ctx := context.Background()
	c, err := fencelock.Open(ctx, "mem://example") // redis://…, etcd://…, postgres://… in production
	if err != nil {
		panic(err)
	}
	defer c.Close()

	l, err := c.Acquire(ctx, "nightly-report", &fencelock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)

	var report guard.Counter // the protected resource checks the fence
	v, err := report.Claim(l.Context(), l.Fence())
	if err != nil {
		panic(err) // guard.ErrStale: a newer holder exists; stop
	}
	if err := report.WriteClaimed(l.Context(), l.Fence(), v+1); err != nil {
		panic(err)
	}
	fmt.Println("fence", l.Fence(), "wrote", v+1)
	// Output: fence 1 wrote 1
}

// TryAcquire does not wait: a held lock is ErrNotAcquired.
func ExampleClient_TryAcquire() {
	ctx := context.Background()
	c, _ := fencelock.Open(ctx, "mem://example-try")
	defer c.Close()

	l, _ := c.TryAcquire(ctx, "job", nil)
	defer l.Release(ctx)

	_, err := c.TryAcquire(ctx, "job", nil)
	fmt.Println(errors.Is(err, fencelock.ErrNotAcquired))
	// Output: true
}

// A lease that can no longer be renewed ends: Done closes and Err says
// why. Stop the work when it does.
func ExampleLease_Done() {
	ctx := context.Background()
	c, _ := fencelock.Open(ctx, "mem://example-done")
	defer c.Close()

	l, _ := c.Acquire(ctx, "job", &fencelock.AcquireOptions{TTL: 50 * time.Millisecond, AutoRenew: fencelock.Bool(false)})
	select {
	case <-l.Done():
		fmt.Println(errors.Is(l.Err(), fencelock.ErrLeaseLost))
	case <-time.After(5 * time.Second):
		fmt.Println("still held")
	}
	fmt.Println(errors.Is(l.Release(ctx), fencelock.ErrLeaseLost))
	// Output:
	// true
	// true
}

// Acquire waits, bounded by ctx or by AcquireOptions.Wait.
func ExampleClient_Acquire() {
	ctx := context.Background()
	c, _ := fencelock.Open(ctx, "mem://example-wait")
	defer c.Close()

	held, _ := c.TryAcquire(ctx, "job", nil)
	_, err := c.Acquire(ctx, "job", &fencelock.AcquireOptions{Wait: 20 * time.Millisecond})
	fmt.Println(errors.Is(err, fencelock.ErrNotAcquired))

	go func() { time.Sleep(10 * time.Millisecond); held.Release(ctx) }()
	l, err := c.Acquire(ctx, "job", nil)
	fmt.Println(err == nil, l.Fence() > held.Fence())
	l.Release(ctx)
	// Output:
	// true
	// true true
}

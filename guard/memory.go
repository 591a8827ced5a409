package guard

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencelock/fencelock/driver"
)

var _ Resource = (*Counter)(nil)

// Counter is an in-memory guarded integer: the reference resource of the
// conformance suite and the CLI's lost-update experiment. Safe for
// concurrent use. The zero value is a counter at 0 with fence 0.
type Counter struct {
	mu    sync.Mutex
	fence driver.Fence
	value int64
}

// Read returns the value without any fence check (the unfenced mode).
func (c *Counter) Read(context.Context) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.value, nil
}

// Write sets the value without any fence check (the unfenced mode).
func (c *Counter) Write(_ context.Context, v int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.value = v
	return nil
}

// Claim stamps fence on the counter if it is greater than the stored fence
// and returns the value, as UPDATE ... SET fence=$f WHERE fence<$f RETURNING
// value does. It returns ErrStale if fence is not greater.
func (c *Counter) Claim(_ context.Context, fence driver.Fence) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fence <= c.fence {
		return 0, fmt.Errorf("%w (claim with fence %d, resource at %d)", ErrStale, fence, c.fence)
	}
	c.fence = fence
	return c.value, nil
}

// WriteClaimed sets the value only if the stored fence is still fence (no
// newer holder claimed since). It returns ErrStale otherwise.
func (c *Counter) WriteClaimed(_ context.Context, fence driver.Fence, v int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fence != fence {
		return fmt.Errorf("%w (write with fence %d, resource claimed by %d)", ErrStale, fence, c.fence)
	}
	c.value = v
	return nil
}

// WriteIfNotOlder sets the value and stamps fence if fence is at least the
// stored fence (write-only mode). It returns ErrStale otherwise.
func (c *Counter) WriteIfNotOlder(_ context.Context, fence driver.Fence, v int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fence < c.fence {
		return fmt.Errorf("%w (write with fence %d, resource at %d)", ErrStale, fence, c.fence)
	}
	c.fence = fence
	c.value = v
	return nil
}

// Fence returns the highest fence the counter has seen.
func (c *Counter) Fence() driver.Fence {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fence
}

package fencelock

import (
	"math/rand/v2"
	"time"
)

// Backoff returns how long to wait before retry number attempt (0-based).
// It must be safe for concurrent use and should be jittered.
type Backoff func(attempt int) time.Duration

// ExponentialBackoff returns a full-jitter exponential backoff: a uniform
// random duration in [0, min(max, base·2^attempt)], never below base/2.
func ExponentialBackoff(base, max time.Duration) Backoff {
	if base <= 0 {
		base = time.Millisecond
	}
	if max < base {
		max = base
	}
	return func(attempt int) time.Duration {
		ceil := max
		if attempt < 30 {
			if d := base << uint(attempt); d > 0 && d < max {
				ceil = d
			}
		}
		floor := base / 2
		return floor + rand.N(ceil-floor+1)
	}
}

// DefaultBackoff is the Backoff used when Options.Backoff is nil:
// full jitter from 2 ms doubling up to 100 ms. (A function, not a
// variable: no caller can change another's default.)
func DefaultBackoff(attempt int) time.Duration { return defaultBackoff(attempt) }

var defaultBackoff = ExponentialBackoff(2*time.Millisecond, 100*time.Millisecond)

package redis_test

import (
	"errors"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redis"
)

// TestNewRejectsNilClient: New reports a nil client as ErrInvalid, not a
// panic.
func TestNewRejectsNilClient(t *testing.T) {
	if c, err := redis.New(nil, nil, nil); c != nil || !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("New(nil): %v, %v; want nil, ErrInvalid", c, err)
	}
}

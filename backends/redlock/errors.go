package redlock

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redisx"
)

// nodeErr wraps a go-redis error from one primary once, with the driver
// sentinel it means:
//   - ErrClosed when the go-redis client was closed;
//   - ErrInvalid for a refused connection set-up (a wrong or missing
//     password, an unknown database number): a configuration error, and
//     the command never ran;
//   - nothing more for a Redis error reply that says the request itself is
//     wrong (WRONGTYPE, NOPERM, a script error): retrying will not help;
//   - ErrUnavailable otherwise: network errors, timeouts, and replies that
//     say the server cannot serve now (LOADING, BUSY, READONLY, ...).
func nodeErr(addr, op string, err error) error {
	switch {
	case errors.Is(err, goredis.ErrClosed):
		return fmt.Errorf("redlock %s on %s: %w: %w", op, addr, driver.ErrClosed, err)
	case redisx.ConfigReply(err):
		return fmt.Errorf("%w: redlock %s on %s: %w: the primary refused this connection's set-up (password, user or database number): check the URL or client options; no command ran", driver.ErrInvalid, op, addr, err)
	case redisx.IsReply(err) && !redisx.UnavailableReply(err):
		return fmt.Errorf("redlock %s on %s: %w", op, addr, err)
	}
	return fmt.Errorf("%w: redlock %s on %s: %w", driver.ErrUnavailable, op, addr, err)
}

// ctxErr is the error for a call whose caller's ctx ended: it wraps the
// ctx error (errors.Is(err, ctx.Err()) holds) and says what was pending.
func ctxErr(ctx context.Context, op, state string) error {
	return fmt.Errorf("redlock %s: %w (%s)", op, ctx.Err(), state)
}

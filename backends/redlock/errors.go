package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
)

// nodeErr wraps a go-redis error from one primary once, with the driver
// sentinel it means:
//   - ErrClosed when the go-redis client was closed;
//   - nothing more for a Redis error reply that says the request itself is
//     wrong (WRONGTYPE, NOPERM, a script error): retrying will not help;
//   - ErrUnavailable otherwise: network errors, timeouts, and replies that
//     say the server cannot serve now (LOADING, BUSY, READONLY, ...).
func nodeErr(addr, op string, err error) error {
	switch {
	case errors.Is(err, goredis.ErrClosed):
		return fmt.Errorf("redlock %s on %s: %w: %w", op, addr, driver.ErrClosed, err)
	case isReply(err) && !unavailableReply(err):
		return fmt.Errorf("redlock %s on %s: %w", op, addr, err)
	}
	return fmt.Errorf("%w: redlock %s on %s: %w", driver.ErrUnavailable, op, addr, err)
}

// ctxErr is the error for a call whose caller's ctx ended: it wraps the
// ctx error (errors.Is(err, ctx.Err()) holds) and says what was pending.
func ctxErr(ctx context.Context, op, state string) error {
	return fmt.Errorf("redlock %s: %w (%s)", op, ctx.Err(), state)
}

// isReply reports whether err is an error reply from the server.
func isReply(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// unavailableReply reports whether a server error reply means "cannot
// serve now" rather than "bad request".
func unavailableReply(err error) bool {
	for _, p := range []string{"LOADING", "MASTERDOWN", "READONLY", "TRYAGAIN", "BUSY", "NOREPLICAS", "OOM", "MAXCLIENTS", "ERR max number of clients"} {
		if strings.HasPrefix(err.Error(), p) {
			return true
		}
	}
	return false
}

// notSent reports whether err shows the request never reached the server
// (no connection could be made), so it cannot have been applied.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, goredis.ErrClosed) || errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrPoolExhausted)
}

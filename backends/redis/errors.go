package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
)

// classify wraps a go-redis error once, with the driver sentinel it means:
//   - ErrClosed when the go-redis client was closed;
//   - the ctx error when ctx ended (errors.Is(err, ctx.Err()) holds);
//   - ErrInvalid for a MOVED or ASK reply: a single-server client talks to
//     a Redis Cluster node; and for a refused connection set-up (a wrong or
//     missing password, an unknown database number): a configuration
//     error, and the command never ran;
//   - nothing more for a Redis error reply that says the request itself is
//     wrong (WRONGTYPE, NOPERM, a script error): retrying will not help;
//   - ErrUnavailable otherwise: network errors, timeouts, and replies that
//     say the server cannot serve now (LOADING, CLUSTERDOWN, READONLY, ...).
func classify(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, goredis.ErrClosed):
		return fmt.Errorf("redis %s: %w: %w", op, driver.ErrClosed, err)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return fmt.Errorf("redis %s: %w", op, err)
	case ctx.Err() != nil:
		return fmt.Errorf("redis %s: %w (%w)", op, ctx.Err(), err)
	case isReply(err) && (strings.HasPrefix(err.Error(), "MOVED ") || strings.HasPrefix(err.Error(), "ASK ")):
		return fmt.Errorf("%w: redis %s: %w: the server is a Redis Cluster node: open it with ?cluster=true or pass a *goredis.ClusterClient", driver.ErrInvalid, op, err)
	case configReply(err):
		return fmt.Errorf("%w: redis %s: %w: the server refused this connection's set-up (password, user or database number): check the URL or client options; no command ran", driver.ErrInvalid, op, err)
	case isReply(err) && !unavailableReply(err):
		return fmt.Errorf("redis %s: %w", op, err)
	}
	return fmt.Errorf("%w: redis %s: %w; check that the server is up and the URL or client options point at it", driver.ErrUnavailable, op, err)
}

// configReply reports whether err is the server refusing a connection's
// set-up (AUTH, HELLO, SELECT), which go-redis sends before a connection's
// first command: a wrong or missing password, an unknown user, a database
// number the server does not have. The command itself never ran.
func configReply(err error) bool {
	if !isReply(err) {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"NOAUTH ", "WRONGPASS ", "ERR DB index", "ERR invalid DB index", "ERR AUTH ", "ERR Client sent AUTH"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// isReply reports whether err is an error reply from the server.
func isReply(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// unavailableReply reports whether a server error reply means "cannot
// serve now" rather than "bad request".
func unavailableReply(err error) bool {
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "TRYAGAIN", "BUSY", "NOREPLICAS", "OOM", "MAXCLIENTS", "ERR max number of clients"} {
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
	return configReply(err) || errors.Is(err, goredis.ErrClosed) || errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrPoolExhausted)
}

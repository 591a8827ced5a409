package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redisx"
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
	case redisx.ClusterRedirect(err):
		return fmt.Errorf("%w: redis %s: %w: the server is a Redis Cluster node: open it with ?cluster=true or pass a *goredis.ClusterClient", driver.ErrInvalid, op, err)
	case redisx.ConfigReply(err):
		return fmt.Errorf("%w: redis %s: %w: the server refused this connection's set-up (password, user or database number): check the URL or client options; no command ran", driver.ErrInvalid, op, err)
	case redisx.IsReply(err) && !redisx.UnavailableReply(err):
		return fmt.Errorf("redis %s: %w", op, err)
	}
	return fmt.Errorf("%w: redis %s: %w; check that the server is up and the URL or client options point at it", driver.ErrUnavailable, op, err)
}

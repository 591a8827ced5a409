package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelock/fencelock/driver"
)

// ctxErr is ctx's error, also wrapping its cause when that differs (a
// Client closing, a wait bound), so that errors.Is(err, ctx.Err()) holds.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, err) {
		return fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}

// pgCode returns the SQLSTATE of a server error, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// fatal reports whether err is a server error that ended the session:
// pg_terminate_backend (57P01), a crash shutdown (57P02), the idle
// transaction timeout (25P03), or any FATAL/PANIC.
func fatal(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "57P01", "57P02", "57P03", "25P03":
		return true
	}
	return strings.EqualFold(pe.Severity, "FATAL") || strings.EqualFold(pe.Severity, "PANIC")
}

// storeErr maps an error met while acquiring (getting a connection, taking
// the lock, flushing the fence) to the driver's taxonomy: the caller's ctx
// error if ctx ended, ErrInvalid for a bad run-time parameter, ErrClosed for
// a closed pool, ErrUnavailable for everything that means the server
// cannot be used right now, and a plain wrapped error for the rest.
func storeErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (pgadvisory: %s: %v)", ctxErr(ctx), what, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// A timeout of our own (connect_timeout, a cleanup bound).
		return fmt.Errorf("%w: pgadvisory: %s timed out: %w", driver.ErrUnavailable, what, err)
	}
	if strings.Contains(err.Error(), "closed pool") {
		return fmt.Errorf("%w: pgadvisory: %s: the pgxpool.Pool was closed: close the fencelock Client before its pool", driver.ErrClosed, what)
	}
	switch code := pgCode(err); {
	case code == "42704" || code == "22023":
		// unrecognized configuration parameter / invalid value, sent as a
		// startup parameter from the URL.
		return fmt.Errorf("%w: pgadvisory: %s: the server rejects a run-time parameter of the connection string: %w", driver.ErrInvalid, what, err)
	case code == "42883":
		return fmt.Errorf("%w: pgadvisory: %s: the server lacks pg_current_xact_id or pg_logical_emit_message: PostgreSQL 13 or later is required: %w", driver.ErrUnavailable, what, err)
	case code == "25006" || code == "0A000" || strings.Contains(err.Error(), "during recovery"):
		return fmt.Errorf("%w: pgadvisory: %s: the server is a read-only standby; connect to the primary (target_session_attrs=read-write): %w", driver.ErrUnavailable, what, err)
	case code == "53300" || code == "53400" || strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P") || strings.HasPrefix(code, "28"):
		return fmt.Errorf("%w: pgadvisory: %s: %w", driver.ErrUnavailable, what, err)
	case code != "" && !fatal(err):
		return fmt.Errorf("pgadvisory: %s: %w", what, err)
	}
	// Connection errors: refused, reset, closed, DNS, TLS, FATAL.
	return fmt.Errorf("%w: pgadvisory: %s: %w", driver.ErrUnavailable, what, err)
}

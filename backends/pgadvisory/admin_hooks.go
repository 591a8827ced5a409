package pgadvisory

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock/driver"
)

var (
	_ driver.QueueAdmin = (*backend)(nil)
	_ driver.LoadAdmin  = (*backend)(nil)
)

// Waiters implements driver.QueueAdmin: the number of sessions queued in
// the server's lock queue (pg_locks rows not granted) for the advisory
// lock of the store key name. Acquires polling with TryAcquire because
// Config.MaxWaitConns are all in use are not queued, and not counted.
func (b *backend) Waiters(ctx context.Context, name string) (int, error) {
	key := Key(name)
	hi, lo := int64(uint64(key)>>32), int64(uint32(key))
	var n int
	err := b.admin(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND NOT granted`, hi, lo).Scan(&n)
	})
	if err != nil {
		return 0, storeErr(ctx, "admin waiters (pg_locks)", err)
	}
	return n, nil
}

// Busy implements driver.LoadAdmin: it opens a session of its own whose
// transaction has a transaction ID and stays open until stop is called,
// as a long-running write transaction of an application would. While it
// is open the server's snapshot horizon (the oldest transaction still
// running) stays behind it, so a fence drawn from snapshots rather than
// from the transaction ID counter would stop rising or go backwards;
// pg_current_xact_id() keeps rising. stop rolls the transaction back and
// closes the session.
func (b *backend) Busy(ctx context.Context) (stop func(), err error) {
	conn, err := connectLike(ctx, b.pool)
	if err != nil {
		return nil, storeErr(ctx, "admin busy: connect", err)
	}
	if _, err := conn.Exec(ctx, "BEGIN; SELECT pg_current_xact_id()"); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, storeErr(ctx, "admin busy: open a write transaction", err)
	}
	return func() {
		// Closing the session ends its transaction (rolled back).
		_ = conn.Close(context.WithoutCancel(ctx))
	}, nil
}

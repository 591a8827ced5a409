package pgadvisory

// Admin (internals; the package doc in doc.go has what users need).
//
// The backend implements driver.Admin, which `fencelock conformance
// --url` uses (Client.As does not hand it out): Expire
// terminates (pg_terminate_backend) the session holding the advisory lock
// of a name, found in pg_locks, whichever client it belongs to; KillSessions
// terminates every session of this Client (held leases, waiters, idle pool
// connections). Both run on a connection of
// their own and need the pg_signal_backend role (or the same role as the
// sessions, or a superuser). Beside them, driver.QueueAdmin counts the
// sessions queued for a name (pg_locks rows not granted), and
// driver.LoadAdmin holds a write transaction open in a session of its
// own, so that the suite checks that fences keep rising while the
// server's snapshot horizon is held back.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Expire implements driver.Admin: it terminates, with
// pg_terminate_backend, the server session holding the advisory lock of
// the store key name (found in pg_locks: a bigint advisory lock shows as
// classid = high 32 bits, objid = low 32 bits, objsubid = 1), whichever
// client it belongs to, and waits until that session has exited, which
// frees the lock, as its idle timeout (the TTL) would. It returns nil if
// no session holds the lock. The role needs pg_signal_backend (or to be
// the holder's role, or a superuser).
func (b *backend) Expire(ctx context.Context, name string) error {
	key := Key(name)
	hi, lo := int64(uint64(key)>>32), int64(uint32(key))
	err := b.admin(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT pid FROM pg_locks
			WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND granted`, hi, lo)
		if err != nil {
			return err
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		return terminate(ctx, conn, pids)
	})
	if err != nil {
		return storeErr(ctx, "admin expire (pg_terminate_backend)", err)
	}
	return nil
}

// KillSessions implements driver.Admin: it terminates, with
// pg_terminate_backend, every server session of this backend: the
// connections of held leases and of waiting acquires and the idle
// connections of the pool, and waits until they have
// exited, which frees their locks; the leases see their
// connections closed and report the loss. Later requests use new
// connections. It runs on a connection of its own, opened with the pool's
// settings. Behind PgBouncer the PIDs are PgBouncer's, not the server's:
// use it against the server.
func (b *backend) KillSessions(ctx context.Context) error {
	pids := map[uint32]bool{}
	for _, l := range b.watch.list() {
		l.ncMu.Lock()
		if l.nc != nil {
			pids[l.conn.PgConn().PID()] = true
		}
		l.ncMu.Unlock()
	}
	b.mu.Lock()
	for pc := range b.waiting {
		pids[pc.Conn().PgConn().PID()] = true
	}
	b.mu.Unlock()
	idle := b.pool.AcquireAllIdle(ctx)
	for _, pc := range idle {
		pids[pc.Conn().PgConn().PID()] = true
	}
	list := make([]int32, 0, len(pids))
	for pid := range pids {
		list = append(list, int32(pid))
	}
	err := b.admin(ctx, func(conn *pgx.Conn) error { return terminate(ctx, conn, list) })
	for _, pc := range idle { // terminated: close them so the pool drops them
		discard(pc)
	}
	if err != nil {
		return storeErr(ctx, "admin kill sessions (pg_terminate_backend)", err)
	}
	return nil
}

// admin runs f on a new connection of its own (not the pool's: it may be
// exhausted, and f may terminate the pool's sessions), made with the
// pool's settings and hooks.
func (b *backend) admin(ctx context.Context, f func(*pgx.Conn) error) error {
	conn, err := connectLike(ctx, b.pool)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(conn)
}

// terminateWait bounds how long terminate waits for the terminated
// sessions to exit.
const terminateWait = 10 * time.Second

// terminate ends the sessions pids with pg_terminate_backend and waits
// until they have exited: pg_terminate_backend only signals the session,
// which frees its locks when it exits a moment later.
func terminate(ctx context.Context, conn *pgx.Conn, pids []int32) error {
	if len(pids) == 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", pids); err != nil {
		return err
	}
	deadline := time.Now().Add(terminateWait)
	for {
		var left int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])", pids).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d terminated session(s) still running after %v", left, terminateWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// connectLike opens a connection outside pool with its settings and hooks.
func connectLike(ctx context.Context, pool *pgxpool.Pool) (*pgx.Conn, error) {
	pc := pool.Config()
	cc := pc.ConnConfig
	if pc.BeforeConnect != nil {
		if err := pc.BeforeConnect(ctx, cc); err != nil {
			return nil, err
		}
	}
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	if pc.AfterConnect != nil {
		if err := pc.AfterConnect(ctx, c); err != nil {
			_ = c.Close(ctx)
			return nil, err
		}
	}
	return c, nil
}

package pgadvisory

import (
	"context"
	"fmt"
)

// Expire implements driver.Admin: it terminates, with
// pg_terminate_backend, the server session holding the advisory lock of
// the store key name (found in pg_locks: a bigint advisory lock shows as
// classid = high 32 bits, objid = low 32 bits, objsubid = 1), whichever
// client it belongs to. The server then ends its transaction, which frees
// the lock at once, as its idle timeout (the TTL) would. It returns nil if
// no session holds the lock. The role needs pg_signal_backend (or to be
// the holder's role, or a superuser).
func (b *backend) Expire(ctx context.Context, name string) error {
	key := Key(name)
	hi, lo := int64(uint64(key)>>32), int64(uint32(key))
	err := b.adminExec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND granted`, hi, lo)
	if err != nil {
		return storeErr(ctx, "admin expire (pg_terminate_backend)", err)
	}
	return nil
}

// KillSessions implements driver.Admin: it terminates, with
// pg_terminate_backend, every server session of this backend: the
// connections of held leases and of waiting acquires, the idle connections
// of the pool, and the fence-flush connection. The server ends their
// transactions, which frees their locks at once; the leases see their
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
	if b.flush != nil {
		if pid := b.flush.pid(); pid != 0 {
			pids[pid] = true
		}
	}
	list := make([]int64, 0, len(pids))
	for pid := range pids {
		list = append(list, int64(pid))
	}
	err := b.adminExec(ctx, "SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", list)
	for _, pc := range idle { // terminated: close them so the pool drops them
		discard(pc)
	}
	if err != nil {
		return storeErr(ctx, "admin kill sessions (pg_terminate_backend)", err)
	}
	return nil
}

// adminExec runs one statement on a new connection of its own (not the
// pool's: it may be exhausted, and the statement may terminate the pool's
// sessions), made from the pool's connection settings.
func (b *backend) adminExec(ctx context.Context, sql string, args ...any) error {
	conn, err := connectLike(ctx, b.pool)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

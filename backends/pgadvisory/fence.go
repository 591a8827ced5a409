package pgadvisory

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The strict grant (see "Fence" in the package doc) is one simple-protocol
// query of three parts, run in order on one session:
//
//  1. BEGIN; the session takes the lock at session level
//     (pg_try_advisory_lock, or pg_advisory_lock waiting in the server's
//     queue); only if it got it: pg_current_xact_id() (the fence) and a
//     transactional WAL message, so that this transaction's commit writes
//     WAL and therefore waits for its flush (synchronous_commit raised
//     from off to local for it); COMMIT. The session still holds the lock.
//  2. BEGIN (the lease's transaction); the TTL (SET LOCAL
//     idle_in_transaction_session_timeout); the same lock at transaction
//     level, granted at once since this session holds it; then the
//     session-level hold is dropped (pg_advisory_unlock), leaving the
//     transaction's.
//
// A try that missed leaves the lease's transaction empty (the client rolls
// it back). The custom setting fencelock.held carries "the session got the
// lock" from part 1 to part 2; part 1 always sets it, so a stale value is
// never read.

// fenceSelect is the select list of part 1 after the session got the lock.
const fenceSelect = "pg_current_xact_id()::text, pg_logical_emit_message(true, 'fencelock', '')," +
	" CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', true) END"

// takeOver is part 2's expression that moves the lock of key from the
// session to the lease's transaction: true when done.
func takeOver(k string) string {
	return "(SELECT pg_advisory_unlock(" + k + ") FROM (SELECT pg_advisory_xact_lock(" + k + ")) AS x)"
}

// tryStrictSQL is TryAcquire's query with the fence flush on. Results: BEGIN;
// (fence or NULL, message LSN, setting, synchronous_commit); COMMIT; BEGIN;
// (TTL setting, true if granted).
func tryStrictSQL(key, ms int64) string {
	k := strconv.FormatInt(key, 10)
	var sb strings.Builder
	sb.WriteString("BEGIN; SELECT CASE WHEN l THEN pg_current_xact_id()::text END," +
		" CASE WHEN l THEN pg_logical_emit_message(true, 'fencelock', '') END," +
		" CASE WHEN l AND current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', true) END")
	sb.WriteString(", set_config('fencelock.held', CASE WHEN l THEN '")
	sb.WriteString(k)
	sb.WriteString("' ELSE '' END, false) FROM (SELECT pg_try_advisory_lock(")
	sb.WriteString(k)
	sb.WriteString(") AS l) AS s; COMMIT; BEGIN; SELECT set_config('idle_in_transaction_session_timeout', '")
	sb.WriteString(strconv.FormatInt(ms, 10))
	sb.WriteString("', true), CASE WHEN current_setting('fencelock.held', true) = '")
	sb.WriteString(k)
	sb.WriteString("' THEN ")
	sb.WriteString(takeOver(k))
	sb.WriteString(" END")
	return sb.String()
}

// waitSQL is Acquire's query: it waits in the server's queue with
// statement_timeout and lock_timeout lifted, and (check) the client
// connection checked every second (PostgreSQL 14 and later).
//
// Strict, results: BEGIN; (settings); (lock); (fence, message LSN,
// synchronous_commit); COMMIT; BEGIN; (TTL setting, true). The lifted
// timeouts are SET LOCAL in the first transaction, so the lease's
// transaction has the session's own.
//
// Not strict, results: BEGIN; (settings); (lock); (restored timeouts, fence).
func waitSQL(key, ms int64, strict, check bool) string {
	k := strconv.FormatInt(key, 10)
	ttl := strconv.FormatInt(ms, 10)
	var sb strings.Builder
	if strict {
		sb.WriteString("BEGIN; SELECT set_config('statement_timeout', '0', true), set_config('lock_timeout', '0', true)")
		if check {
			// A waiter whose client vanished leaves the queue within a second.
			sb.WriteString(", set_config('client_connection_check_interval', '1000', true)")
		}
		sb.WriteString("; SELECT pg_advisory_lock(")
		sb.WriteString(k)
		sb.WriteString("); SELECT ")
		sb.WriteString(fenceSelect)
		sb.WriteString("; COMMIT; BEGIN; SELECT set_config('idle_in_transaction_session_timeout', '")
		sb.WriteString(ttl)
		sb.WriteString("', true), ")
		sb.WriteString(takeOver(k))
		return sb.String()
	}
	sb.WriteString("BEGIN; SELECT set_config('idle_in_transaction_session_timeout', '")
	sb.WriteString(ttl)
	sb.WriteString("', true), set_config('fencelock.statement_timeout', current_setting('statement_timeout'), true)," +
		" set_config('fencelock.lock_timeout', current_setting('lock_timeout'), true)," +
		" set_config('statement_timeout', '0', true), set_config('lock_timeout', '0', true)")
	if check {
		sb.WriteString(", set_config('client_connection_check_interval', '1000', true)")
	}
	sb.WriteString("; SELECT pg_advisory_xact_lock(")
	sb.WriteString(k)
	sb.WriteString("); SELECT set_config('statement_timeout', current_setting('fencelock.statement_timeout'), true)," +
		" set_config('lock_timeout', current_setting('fencelock.lock_timeout'), true), pg_current_xact_id()::text")
	return sb.String()
}

// discard closes pc's connection after a failed or cancelled grant. With
// the fence flush on, the session may hold the lock at session level
// outside any transaction (a failure between part 1's COMMIT and part 2's
// BEGIN): closing the connection ends the session and frees it, but behind
// PgBouncer the server session outlives the client connection, so it is
// first asked to drop every session-level advisory lock (best effort).
func (b *backend) discard(pc *pgxpool.Conn) {
	pg := pc.Conn().PgConn()
	if b.strict && !pg.IsClosed() && pg.TxStatus() == 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		_ = pg.Exec(ctx, "SELECT pg_advisory_unlock_all()").Close()
		cancel()
	}
	discard(pc)
}

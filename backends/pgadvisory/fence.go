package pgadvisory

// Fence (internals; the package doc in doc.go has what users need).
//
// Fences are transaction IDs, pg_current_xact_id(), taken while the session
// holds the lock. Transaction IDs are 64-bit (xid8: epoch and xid), assigned
// from one cluster-wide counter, and never reused nor rolled back (a
// rolled-back transaction's ID is consumed too), so a grant after another
// grant of the same name always has a larger fence: the next holder's ID is
// assigned after it got the lock, hence after the previous holder let it go,
// hence after the previous holder's ID was assigned. It fits in an int64 and
// is never 0. No table or sequence is needed, so the backend works for any
// role that can connect, and behind PgBouncer. A sequence would do as well
// but needs DDL; a counter row updated in the lease's transaction would not
// (it rolls back with a lost lease).
//
// An ID that no durable WAL record mentions can be handed out again after a
// server crash (not after a clean restart): crash recovery restarts the
// counter past the last checkpoint's and every replayed record's IDs, and no
// further. So with the fence flush on (the default) the fence is the ID of a
// transaction that commits durably before the grant returns, all in the
// grant's one round trip:
//
//	BEGIN;
//	SELECT CASE WHEN l THEN pg_current_xact_id() END,                       -- the fence
//	       ROW(CASE WHEN l THEN pg_logical_emit_message(true, 'fencelock', '') END,
//	           <synchronous_commit raised from off to local, for this commit>,
//	           set_config('fencelock.held', CASE WHEN l THEN '<key>' ELSE '' END, false))
//	  FROM (SELECT pg_try_advisory_lock(<key>) AS l) AS s;
//	COMMIT;
//	BEGIN;                                                                   -- the lease's transaction
//	SELECT set_config('idle_in_transaction_session_timeout', '<TTL ms>', true),
//	       CASE WHEN current_setting('fencelock.held', true) = '<key>' THEN
//	         (SELECT pg_advisory_unlock(<key>) FROM (SELECT pg_advisory_xact_lock(<key>)) AS x) END;
//
// The session takes the lock at session level, which outlives the first
// transaction; assigns the fence; writes a transactional WAL message, so
// that the COMMIT writes WAL and therefore waits until its commit record,
// which names the fence, is flushed (with synchronous replication, until
// the standbys have it too); then the lease's transaction takes the same
// lock at transaction level — granted at once, since this session holds it
// — and drops the session-level hold. The lock never leaves the session, so
// the fence was assigned while it was held, and it is durable before the
// reply is sent: after a crash the server restarts past it
// (TestFenceSurvivesServerCrash kills the server right after a grant;
// without the flush the fence repeats). Blocking Acquire does the same with
// pg_advisory_lock, so the flush adds no round trip to a hand-off either
// (TestFenceSurvivesServerCrashAfterWait).
// The setting fencelock.held (set in the session by every such grant) tells
// the second part whether the first got the lock; a miss leaves the lease's
// transaction empty and it is rolled back. This is what makes the guarantee
// FenceStrict: as strong as PostgreSQL's durability of a committed
// transaction (with synchronous replication, across failover too; with
// asynchronous replicas a failover can lose it, as it can lose any commit).
// The lease's own transaction then writes nothing, so Release's COMMIT is
// not flushed. A query that fails, or whose caller gives up, closes its
// connection, which ends the session and frees a session-level hold too.
//
// Config.NoFenceFlush (fence_flush=false) uses the lease transaction's own
// ID, taken in the query shown under "Lease = transaction" (atop pgadvisory.go): no WAL flush per
// grant, and FenceBestEffort. Both kinds of fence are IDs assigned while the
// lock was held, so clients with and without the flush, and older versions
// of this package (whose strict fence was the lease transaction's ID), may
// share names. Logical decoding plugins see the messages (prefix
// "fencelock") only if they ask for messages.
//
// Cost (internals; the package doc in doc.go has what users need).
//
// Uncontended, a grant is one round trip (with the fence flush on, the
// default, it includes one WAL flush on the server); Release is one; a
// TryAcquire that finds the lock held is two (the lease transaction is
// rolled back). The raw pgx way — Begin, SELECT pg_try_advisory_xact_lock,
// Commit — is three. A hand-off is the holder's COMMIT, then the waiter's
// server session flushes its fence and answers. Concurrent grants share WAL
// flushes through PostgreSQL's own group commit. Statements per operation,
// each line one round trip (a pipeline of statements prepared once per
// connection, or one simple query; see query.go):
//
//	TryAcquire, flush off  BEGIN; SELECT (TTL, try lock, fence)                        2
//	TryAcquire, strict     BEGIN; SELECT (try lock, fence, WAL message); COMMIT;
//	                       BEGIN; SELECT (TTL, take over)                               5
//	Acquire, flush off     BEGIN; SELECT (settings); SELECT (fence, restore) FROM (lock) 3
//	  on a session whose   BEGIN; SELECT (fence) FROM (TTL, lock) WHERE (settings     2
//	  timeouts are 0         as the settings statement would leave them)
//	Acquire, strict        BEGIN; SELECT (settings); SELECT (fence, ...) FROM (lock);
//	                       COMMIT; BEGIN; SELECT (TTL, take over)                      6
//	Release                COMMIT                                                       1
//
// A waiter's session runs nothing between its grant and the statement
// that reads its fence: both are one statement (see waitQuery).
//
// What every fence costs, with or without the flush: a transaction ID.
// Raw pgx's lock transaction has none, so its COMMIT writes no WAL; the
// lease's (or, strict, the fence's) transaction has one, so its COMMIT
// writes a commit record (with the flush off, flushed in the background by
// the WAL writer). On the 2-core VM that is about 30–40 µs of server CPU
// per grant, measured with 8 sessions contending on one key through raw
// pgconn, with and without pg_current_xact_id() in the lock's statement:
// the part of the contended gap to raw pgx that no statement layout
// removes, since a fence that is not a transaction ID would need a table
// or a sequence (see Fence above).
//
// Where a contended hand-off's time goes, flush off (8 clients on one
// name, 2-core VM, 40 interleaved chunks of 300 ms, medians, 2026-12-06):
// raw pgx (pgxpool; Begin; pg_advisory_xact_lock; Commit) 8,937 grants/s;
// BEGIN and the lock with pg_current_xact_id() in one statement, prepared
// and pipelined, 8,207/s (0.92×: the transaction ID and its commit
// record); the same with this package's settings statement (the TTL, the
// timeouts lifted and restored, the client check) 6,943/s (0.78×); the
// driver 6,537/s (0.73×: pool checkout, contexts, the lease and the
// watcher's registration); through fencelock.Client 6,030/s (0.67×). A
// hand-off is the same two round trips as raw pgx's — the waiter's
// statement returns the fence, nothing is sent between the grant and
// Acquire's return, and Release is one COMMIT — so what remains is server
// and client CPU per grant on a machine whose two cores both sides share.
// Before the statements were prepared (see query.go) the server parsed
// about 700 bytes of SQL per grant, and the same measure gave 5,200/s.
// With the settings statement folded into the lock's (foldedWaitQuery;
// BenchmarkContended, the code before and after run alternately, 3 runs
// each of 16 rounds, machine at load 6–7, 2026-12-06): 0.88–0.91× raw
// pgx's grants/s (before: 0.79–0.87×) and 0.98–0.99× raw-fence-sql's, the
// bare lock with its fence in one statement (before: 0.88–0.97×); this
// process's CPU per grant 148–151 µs (before: 168–181 µs).
//
// What the strict fence costs: the WAL flush of its commit, and the server
// work of the second transaction that the same query opens for the lease
// (BEGIN, the TTL setting, the takeover of the lock). The flush cannot go:
// a fence that no flushed WAL record names can repeat after a crash. The
// second transaction cannot either: the fence's transaction must commit to
// be flushed, and the lease must be a transaction of its own for the
// transaction-scoped mode and for the server-enforced TTL (an idle
// transaction's timeout). Measured on a 2-core VM with fsync on, the strict
// TryAcquire+Release took 314–321 µs at the median where raw pgx took
// 89–98 µs and a flushed autocommit INSERT 158–177 µs (two runs of `make
// bench-peers`, 2026-12-03): about 50 µs, or 1.2×, above the sum.
// BenchmarkAcquireReleaseFsync, which interleaves them operation by
// operation (so raw pgx too runs next to WAL flushes, where bench-peers
// times it in a chunk of its own) and floors on a flushed
// pg_logical_emit_message, puts it at 0.98–1.02× of the two (and at
// 1.20–1.56× on 2026-12-06, a machine at load 7–9 whose disk others kept
// busy: the flushed commit alone took 1.2–2.2 ms; the code before that
// day's changes measured 1.31–1.62× alongside). At the SQL
// level the second transaction costs about 40 µs of
// server time, half of it the TTL setting.

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The strict grant (see Fence, atop this file) is one round trip (see
// query.go) of two parts, run in order on one session:
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
const fenceSelect = "pg_current_xact_id()::text, ROW(pg_logical_emit_message(true, 'fencelock', '')," +
	" CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', true) END)"

// takeOver is part 2's expression that moves the lock of key (statement
// argument $n) from the session to the lease's transaction: true when
// done.
func takeOver(n string) string {
	return "(SELECT pg_advisory_unlock($" + n + "::bigint) FROM (SELECT pg_advisory_xact_lock($" + n + "::bigint)) AS x)"
}

// The arguments of every grant query (see query.go): the lock's key and
// the TTL in milliseconds, in that order.
const (
	argKey = 0
	argTTL = 1
)

// grantArgs are the arguments of a grant query, as text, in one
// allocation.
func grantArgs(key, ms int64) [][]byte {
	a := new(struct {
		args [2][]byte
		buf  [40]byte // two int64s in decimal
	})
	b := strconv.AppendInt(a.buf[:0], key, 10)
	k := len(b)
	b = strconv.AppendInt(b, ms, 10)
	a.args[argKey], a.args[argTTL] = b[:k:k], b[k:]
	return a.args[:]
}

// tryStrictQuery is TryAcquire's query with the fence flush on. Results:
// BEGIN; (fence or NULL, ROW(message LSN, synchronous_commit, setting));
// COMMIT; BEGIN; (TTL setting, true if granted). The values the client
// does not read come back as one ROW column, which spares it a column
// each.
var tryStrictQuery = newQuery(
	"BEGIN", nil,
	"SELECT CASE WHEN l THEN pg_current_xact_id()::text END,"+
		" ROW(CASE WHEN l THEN pg_logical_emit_message(true, 'fencelock', '') END,"+
		" CASE WHEN l AND current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', true) END,"+
		" set_config('fencelock.held', CASE WHEN l THEN $1::bigint::text ELSE '' END, false))"+
		" FROM (SELECT pg_try_advisory_lock($1::bigint) AS l) AS s", []int{argKey},
	"COMMIT", nil,
	"BEGIN", nil,
	"SELECT set_config('idle_in_transaction_session_timeout', $1::text, true),"+
		" CASE WHEN current_setting('fencelock.held', true) = $2::bigint::text THEN "+takeOver("2")+" END", []int{argTTL, argKey},
)

// waitQuery is Acquire's query: it waits in the server's queue with
// statement_timeout and lock_timeout lifted (set to 0 only where they are
// not 0 already, which spares the common session two settings and, with
// the flush off, their restore after the grant), and (check) the client
// connection checked every second (PostgreSQL 14 and later; with the
// flush off set for the session, not SET LOCAL, and only where the session
// has no interval of its own, so that foldedWaitQuery finds it set on the
// connection's later waits). With the flush off the session's values are kept in fencelock.statement_timeout
// and fencelock.lock_timeout, SET LOCAL like the rest, so any later
// transaction reads them as the empty string: the restore runs only in the
// transaction that saved them. The lock is taken in a subquery (OFFSET 0
// keeps it from being flattened) of the statement that then reads the
// fence, so that the waiter's server session runs one statement, not two,
// between its grant and its reply; settings come back as one ROW column,
// which the client does not parse.
//
// Strict, results: BEGIN; (settings); (fence, ROW(message LSN,
// synchronous_commit)); COMMIT; BEGIN; (TTL setting, true). The lifted
// timeouts are SET LOCAL in the first transaction, so the lease's
// transaction has the session's own.
//
// Not strict, results: BEGIN; (settings); (fence, restored timeouts):
// the second column NULL when nothing was lifted (then the connection's
// next wait sends foldedWaitQuery).
func waitQuery(strict, check bool) *query {
	return waitQueries[strict][check]
}

var waitQueries = map[bool]map[bool]*query{
	false: {false: newWaitQuery(false, false), true: newWaitQuery(false, true)},
	true:  {false: newWaitQuery(true, false), true: newWaitQuery(true, true)},
}

func newWaitQuery(strict, check bool) *query {
	// A waiter whose client vanished leaves the queue within a second.
	chk := ""
	if check {
		chk = ", set_config('client_connection_check_interval', '1000', true)"
	}
	if strict {
		return newQuery(
			"BEGIN", nil,
			"SELECT ROW(CASE WHEN current_setting('statement_timeout') <> '0' THEN set_config('statement_timeout', '0', true) END,"+
				" CASE WHEN current_setting('lock_timeout') <> '0' THEN set_config('lock_timeout', '0', true) END"+chk+")", nil,
			"SELECT "+fenceSelect+" FROM (SELECT pg_advisory_lock($1::bigint) OFFSET 0) AS w", []int{argKey},
			"COMMIT", nil,
			"BEGIN", nil,
			"SELECT set_config('idle_in_transaction_session_timeout', $1::text, true), "+takeOver("2"), []int{argTTL, argKey},
		)
	}
	if check {
		// Not strict: for the session (see foldedWaitQuery), and only
		// where the session has no interval of its own.
		chk = ", CASE WHEN current_setting('client_connection_check_interval') = '0' THEN set_config('client_connection_check_interval', '1000', false) END"
	}
	return newQuery(
		"BEGIN", nil,
		"SELECT ROW(set_config('idle_in_transaction_session_timeout', $1::text, true),"+
			" CASE WHEN current_setting('statement_timeout') <> '0' OR current_setting('lock_timeout') <> '0' THEN"+
			" ROW(set_config('fencelock.statement_timeout', current_setting('statement_timeout'), true),"+
			" set_config('fencelock.lock_timeout', current_setting('lock_timeout'), true),"+
			" set_config('statement_timeout', '0', true), set_config('lock_timeout', '0', true)) END"+chk+")", []int{argTTL},
		"SELECT pg_current_xact_id()::text, CASE WHEN current_setting('fencelock.statement_timeout', true) <> '' THEN"+
			" ROW(set_config('statement_timeout', current_setting('fencelock.statement_timeout'), true),"+
			" set_config('lock_timeout', current_setting('fencelock.lock_timeout'), true)) END"+
			" FROM (SELECT pg_advisory_xact_lock($1::bigint) OFFSET 0) AS w", []int{argKey},
	)
}

// foldedWaitQuery is Acquire's query with the fence flush off on a
// session that needs no settings lifted for the wait (see foldWait): BEGIN
// and one statement that waits for the lock, reads the fence and sets the
// TTL, one statement fewer than waitQuery's. Its WHERE clause names no
// column of the subquery, so the server evaluates it once, before the
// subquery runs (a one-time filter): only if statement_timeout and
// lock_timeout are 0 and (check) client_connection_check_interval is not,
// as the settings statement of waitQuery would have left them, does it
// wait; otherwise it returns no row, having taken nothing. The settings
// must hold before the statement starts, not within it: the server arms
// the statement timeout and the client check when a statement starts. The
// subquery sets the TTL, then waits (its select list runs in order, and its
// volatile columns are kept although the outer query reads neither), so
// that after the grant the session runs only pg_current_xact_id().
//
// Results: BEGIN; (fence), or no row when a setting was off.
func foldedWaitQuery(check bool) *query { return foldedWaitQueries[check] }

var foldedWaitQueries = map[bool]*query{false: newFoldedWaitQuery(false), true: newFoldedWaitQuery(true)}

func newFoldedWaitQuery(check bool) *query {
	chk := ""
	if check {
		chk = " AND current_setting('client_connection_check_interval') <> '0'"
	}
	return newQuery(
		"BEGIN", nil,
		"SELECT pg_current_xact_id()::text"+
			" FROM (SELECT set_config('idle_in_transaction_session_timeout', $1::text, true), pg_advisory_xact_lock($2::bigint) OFFSET 0) AS w"+
			" WHERE current_setting('statement_timeout') = '0' AND current_setting('lock_timeout') = '0'"+chk, []int{argTTL, argKey},
	)
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

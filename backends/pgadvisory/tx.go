package pgadvisory

// Transaction-scoped mode (internals; the package doc in doc.go has what users need).
//
// Tx(lease), or lease.As(&tx) with a pgx.Tx tx, returns the lease's own
// transaction as a pgx.Tx. Writes made
// through it commit in the same COMMIT that releases the lock, so they are
// applied only if the lock was held without a break until the end: if the
// server cut the lease (TTL) or its connection died, they are rolled back.
// This is the strongest mode — no fence check is needed for data in the same
// database — and the one to use when the protected data lives in this
// PostgreSQL database. Use fences (package guard) for data elsewhere. See Tx
// for the rules (statements are serialized with renewals; Commit and Rollback
// are the lease's; savepoints through Begin).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// ErrTxOwned is returned by Commit and Rollback of the transaction Tx
// returns: the lease owns it.
var ErrTxOwned = errors.New("pgadvisory: the lease owns this transaction: Lease.Release commits it (and frees the lock); use tx.Begin or pgx.BeginFunc for a savepoint you can roll back")

// Tx returns the transaction that holds the lease's lock, as a pgx.Tx, and
// true; or nil and false if l was not granted by this package or has ended.
//
// Writes made through it commit with the COMMIT that Release sends, in the
// same instant the lock is freed — so they are applied only if the lock was
// held without a break until then. If the server cut the lease (its TTL
// passed without renewal) or its connection died, the transaction is gone
// and the writes with it; if the lease had ended or passed its ValidUntil
// when Release is called, Release rolls them back and returns ErrLeaseLost
// (and Client.Close, which abandons held leases, rolls them back too).
// When the data you protect lives in the same PostgreSQL database, this is
// the strongest mode: use it instead of fences. Keep fences (package guard)
// for data elsewhere.
//
// Rules:
//   - Commit and Rollback return ErrTxOwned and do nothing; Release commits.
//     Begin (or pgx.BeginFunc(ctx, tx, fn)) opens a savepoint whose Rollback
//     undoes its writes and keeps the lock.
//   - A statement that fails outside a savepoint aborts the transaction: the
//     lease is lost at once (Lease.Done closes, the lock is freed) and its
//     writes are rolled back. Run statements that may fail in a savepoint.
//   - The lease renews itself with statements on the same connection, so
//     each of your statements waits for a renewal in flight and the reverse;
//     a statement (or open Rows) that outlasts the lease's validity makes
//     the lease end locally. Close Rows promptly; scan every QueryRow.
//   - The server's idle timeout (the TTL) runs between statements: with
//     AutoRenew off, finish within the TTL.
//   - Conn() bypasses that serialization: use it only with AutoRenew off,
//     and never for COMMIT or ROLLBACK. LargeObjects is not supported (use
//     the lo_* SQL functions).
//   - The Tx is valid until the lease ends; afterwards every method returns
//     an error wrapping pgx.ErrTxClosed.
//
// Behind PgBouncer in transaction pooling mode, statements with arguments
// use pgx's extended protocol: configure the pool as usual for PgBouncer
// (e.g. default_query_exec_mode=simple_protocol, or PgBouncer ≥ 1.21 with
// max_prepared_statements).
func Tx(l *fencelock.Lease) (pgx.Tx, bool) {
	if l == nil || l.Err() != nil {
		return nil, false
	}
	var tx pgx.Tx
	if !l.As(&tx) {
		return nil, false
	}
	t, ok := tx.(*leaseTx)
	if !ok {
		return nil, false
	}
	t.l.portable.CompareAndSwap(nil, l)
	return tx, t.l.portable.Load() == l
}

// As implements driver.Aser for Lease.As. Supported target: *pgx.Tx, set
// to the lease's own transaction (the Tx that Tx returns, with the same
// rules) while the lease is held. Prefer Tx(lease): it also binds the Tx to
// the portable lease, so that Release rolls back the writes of a lease the
// portable layer reported lost. A Tx taken only through As stands in for
// that with its own deadline: the last renewal's send time plus the TTL,
// less twice the default drift (Options.DriftFactor 0.01 and 2 ms).
func (l *lease) As(target any) bool {
	p, ok := target.(*pgx.Tx)
	if !ok || l.done.Load() {
		return false
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	if l.tx == nil {
		l.tx = &leaseTx{l: l, conn: l.conn}
	}
	*p = l.tx
	return true
}

// leaseTx is the pgx.Tx Tx hands out (sp == 0) or a savepoint in it.
type leaseTx struct {
	l      *lease
	conn   *pgx.Conn
	sp     int64 // 0: the lease's transaction; else the savepoint number
	closed bool  // savepoint released or rolled back; guarded by l.sem
}

var _ pgx.Tx = (*leaseTx)(nil)

// enter takes the lease's connection for one statement.
func (t *leaseTx) enter(ctx context.Context) (*pgx.Conn, error) {
	if err := t.l.acquire(ctx); err != nil {
		return nil, err
	}
	var err error
	switch {
	case t.l.ended != nil:
		err = fmt.Errorf("%w: %w", pgx.ErrTxClosed, t.l.ended)
	case t.l.portable.Load() != nil && t.l.portable.Load().Err() != nil:
		err = fmt.Errorf("%w: %w", pgx.ErrTxClosed, t.l.portable.Load().Err())
	case t.l.portable.Load() == nil && !time.Now().Before(t.l.localDeadline()):
		err = fmt.Errorf("%w: %w: the lease's validity deadline passed", pgx.ErrTxClosed, driver.ErrLeaseLost)
	case t.closed:
		err = pgx.ErrTxClosed
	default:
		if err = t.l.checkLocked(); err != nil {
			err = fmt.Errorf("%w: %w", pgx.ErrTxClosed, err)
		}
	}
	if err != nil {
		t.l.release()
		return nil, err
	}
	return t.conn, nil
}

// exit gives the connection back; a statement that failed outside a
// savepoint ends the lease now.
func (t *leaseTx) exit() {
	if t.l.ended == nil {
		_ = t.l.checkLocked()
	}
	t.l.release()
}

// Begin opens a savepoint.
func (t *leaseTx) Begin(ctx context.Context) (pgx.Tx, error) {
	c, err := t.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer t.exit()
	t.l.spSeq++
	n := t.l.spSeq
	if err := c.PgConn().Exec(ctx, "SAVEPOINT fencelock_sp_"+strconv.FormatInt(n, 10)).Close(); err != nil {
		return nil, err
	}
	t.l.depth++
	return &leaseTx{l: t.l, conn: t.conn, sp: n}, nil
}

// Commit releases a savepoint; on the lease's transaction it returns
// ErrTxOwned.
func (t *leaseTx) Commit(ctx context.Context) error {
	if t.sp == 0 {
		return ErrTxOwned
	}
	c, err := t.enter(ctx)
	if err != nil {
		return err
	}
	defer t.exit()
	if err := c.PgConn().Exec(ctx, "RELEASE SAVEPOINT fencelock_sp_"+strconv.FormatInt(t.sp, 10)).Close(); err != nil {
		return err
	}
	t.closed = true
	t.l.depth--
	return nil
}

// Rollback rolls a savepoint back (its writes are undone, the lock stays
// held); on the lease's transaction it returns ErrTxOwned. Like pgx's, it
// returns pgx.ErrTxClosed after Commit or Rollback, so defer it freely.
func (t *leaseTx) Rollback(ctx context.Context) error {
	if t.sp == 0 {
		return ErrTxOwned
	}
	c, err := t.enter(ctx)
	if err != nil {
		return err
	}
	defer t.exit()
	sp := "fencelock_sp_" + strconv.FormatInt(t.sp, 10)
	if _, err := c.PgConn().Exec(ctx, "ROLLBACK TO SAVEPOINT "+sp+"; RELEASE SAVEPOINT "+sp).ReadAll(); err != nil {
		return err
	}
	t.closed = true
	t.l.depth--
	return nil
}

func (t *leaseTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := t.enter(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer t.exit()
	return c.Exec(ctx, sql, args...)
}

func (t *leaseTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := t.enter(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		t.exit()
		return nil, err
	}
	return &leaseRows{Rows: rows, t: t}, nil
}

func (t *leaseTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &leaseRow{rows: rows, err: err}
}

func (t *leaseTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c, err := t.enter(ctx)
	if err != nil {
		return errBatch{err}
	}
	return &leaseBatch{BatchResults: c.SendBatch(ctx, b), t: t}
}

func (t *leaseTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	c, err := t.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer t.exit()
	return c.CopyFrom(ctx, table, cols, src)
}

func (t *leaseTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	c, err := t.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer t.exit()
	return c.Prepare(ctx, name, sql)
}

// LargeObjects is not supported: it returns the zero pgx.LargeObjects,
// whose methods panic. pgx's large-object API would bypass the
// serialization with renewals; use the server-side functions (lo_create,
// lo_put, lo_get, lo_unlink) through Exec and QueryRow instead.
func (t *leaseTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Conn returns the lease's connection, or nil once the lease has ended.
// Statements sent through it bypass the serialization with renewals.
func (t *leaseTx) Conn() *pgx.Conn {
	if t.l.done.Load() {
		return nil
	}
	return t.conn
}

// leaseRows gives the connection back when the rows are done.
type leaseRows struct {
	pgx.Rows
	t    *leaseTx
	done bool
}

func (r *leaseRows) Next() bool {
	if r.done {
		return false
	}
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *leaseRows) Close() {
	if !r.done {
		r.Rows.Close()
		r.finish()
	}
}

func (r *leaseRows) finish() {
	r.done = true
	r.t.exit()
}

// leaseRow is QueryRow's result, as pgx's: Scan reads the first row and
// closes the rows.
type leaseRow struct {
	rows pgx.Rows
	err  error
}

func (r *leaseRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// leaseBatch gives the connection back when the batch is closed.
type leaseBatch struct {
	pgx.BatchResults
	t    *leaseTx
	done bool
}

func (b *leaseBatch) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	err := b.BatchResults.Close()
	b.t.exit()
	return err
}

// errBatch is the BatchResults of a batch that could not be sent.
type errBatch struct{ err error }

func (e errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, e.err }
func (e errBatch) Query() (pgx.Rows, error)         { return nil, e.err }
func (e errBatch) QueryRow() pgx.Row                { return &leaseRow{err: e.err} }
func (e errBatch) Close() error                     { return e.err }
func (e errBatch) Tx() pgx.Tx                       { return nil }

package pgadvisory

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// lease is a granted lock: a transaction on a connection checked out of the
// pool. Every statement on that connection — renewals, Release, the
// watcher's check, and the caller's statements through Tx — runs while
// holding sem, because a pgx connection serves one statement at a time.
type lease struct {
	b     *backend
	key   string // store key (prefix + name)
	lock  int64  // advisory lock key, Key(key)
	fence driver.Fence

	sem chan struct{} // 1 slot: held while a statement runs on pc
	// lost fires when the store dropped the lease (OnLost).
	lost lossHooks

	conn *pgx.Conn   // pc's connection, for Tx
	done atomic.Bool // the lease ended (Tx's Conn returns nil)

	// Guarded by sem:
	pc       *pgxpool.Conn // nil once the lease ended
	spSeq    int64         // savepoints opened through Tx
	ms       int64         // current idle_in_transaction_session_timeout
	depth    int           // savepoints open through Tx
	ended    error         // why the lease ended (lost or released), nil while held
	released bool          // ended by Release
	renewed  time.Time     // send time of the last statement that restarted the server's idle timer

	txMu     sync.Mutex
	tx       *leaseTx                        // the Tx handed out, if any
	portable atomic.Pointer[fencelock.Lease] // bound by Tx: the portable lease

	ncMu sync.Mutex
	nc   net.Conn // the socket while the lease owns pc, for breakConn
}

var (
	_ driver.Lease        = (*lease)(nil)
	_ driver.LossNotifier = (*lease)(nil)
	_ driver.Aser         = (*lease)(nil)
)

func newLease(b *backend, pc *pgxpool.Conn, key string, lock int64, fence driver.Fence, ms int64, sent time.Time) *lease {
	l := &lease{b: b, key: key, lock: lock, fence: fence, pc: pc, ms: ms, renewed: sent,
		sem: make(chan struct{}, 1), conn: pc.Conn(), nc: pc.Conn().PgConn().Conn()}
	return l
}

func (l *lease) Fence() driver.Fence { return l.fence }

// OnLost implements driver.LossNotifier, without a goroutine per lease:
// f runs when the lease's connection was found dead or its transaction
// aborted.
func (l *lease) OnLost(f func()) (stop func() bool) { return l.lost.add(f) }

// acquire takes sem, or returns ctx's error.
func (l *lease) acquire(ctx context.Context) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w (pgadvisory: a statement was still running on the lease's connection)", ctxErr(ctx))
	}
}

func (l *lease) tryAcquire() bool {
	select {
	case l.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l *lease) release() { <-l.sem }

// Extend implements driver.Lease: one statement on the lease's connection,
// which restarts the server's idle timer — an empty query, or set_config
// when ttl changes the timeout.
func (l *lease) Extend(ctx context.Context, ttl time.Duration) error {
	ms, err := ttlMillis(ttl)
	if err != nil {
		return err
	}
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
	if l.ended != nil {
		return l.ended
	}
	pg := l.pc.Conn().PgConn()
	if err := l.checkLocked(); err != nil {
		return err
	}
	sql := "-- fencelock renew"
	if ms != l.ms {
		if pg.TxStatus() == 'E' {
			return fmt.Errorf("pgadvisory: cannot change the TTL while a savepoint of the lease's transaction has failed: roll the savepoint back first")
		}
		sql = "SELECT set_config('idle_in_transaction_session_timeout', '" + strconv.FormatInt(ms, 10) + "', true)"
	}
	sent := time.Now()
	_, err = execDetached(ctx, pg, sql)
	if err == nil {
		l.ms, l.renewed = ms, sent
		return nil
	}
	if !pg.IsClosed() && !fatal(err) && pg.TxStatus() != 'I' {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (pgadvisory: renewal not sent: %v)", ctxErr(ctx), err)
		}
		return fmt.Errorf("%w: pgadvisory: renewal: %w", driver.ErrUnavailable, err)
	}
	return l.loseLocked("its connection broke during a renewal", err)
}

// checkLocked ends the lease if its connection is closed or its
// transaction can no longer commit. Callers hold sem.
func (l *lease) checkLocked() error {
	pg := l.pc.Conn().PgConn()
	switch {
	case pg.IsClosed():
		return l.loseLocked("its connection is closed (killed backend, idle timeout, or network)", nil)
	case pg.TxStatus() == 'I':
		return l.loseLocked("its transaction ended outside fencelock (a COMMIT or ROLLBACK sent through Tx().Conn()?)", nil)
	case pg.TxStatus() == 'E' && l.depth == 0:
		return l.loseLocked("a statement failed in its transaction, which can no longer commit (use tx.Begin for statements that may fail)", nil)
	}
	return nil
}

// loseLocked ends the lease as lost: it frees the server side (ROLLBACK on a
// live connection, else close), closes Lost, and returns ErrLeaseLost
// (wrapped, with cause if any). Callers hold sem.
func (l *lease) loseLocked(why string, cause error) error {
	if l.ended != nil {
		return l.ended
	}
	pc := l.pc
	l.pc = nil
	if cause != nil {
		l.ended = fmt.Errorf("%w: pgadvisory: %s: %w", driver.ErrLeaseLost, why, cause)
	} else {
		l.ended = fmt.Errorf("%w: pgadvisory: %s", driver.ErrLeaseLost, why)
	}
	l.finish()
	l.lost.mark()
	pg := pc.Conn().PgConn()
	if !pg.IsClosed() && pg.TxStatus() == 'E' {
		rollback(pc)
	} else {
		discard(pc)
	}
	return l.ended
}

// finish unregisters the lease and gives up its socket (the connection is
// about to go back to the pool). Callers hold sem.
func (l *lease) finish() {
	l.done.Store(true)
	l.b.watch.remove(l)
	l.ncMu.Lock()
	l.nc = nil
	l.ncMu.Unlock()
}

// Release implements driver.Lease: COMMIT, which frees the lock and commits
// what was written through Tx. If writes were made through Tx and the
// portable lease had ended or passed its validity deadline, it sends
// ROLLBACK instead and returns ErrLeaseLost, so that data is never committed
// for a lease reported lost.
func (l *lease) Release(ctx context.Context) error {
	if err := l.acquire(ctx); err != nil {
		// A statement made through Tx is still running. Break the connection:
		// the server rolls the transaction back and frees the lock.
		l.breakConn()
		return fmt.Errorf("pgadvisory: release: a statement on the lease's transaction was still running; the connection was closed, which rolled the transaction back and freed the lock: %w", err)
	}
	defer l.release()
	if l.ended != nil {
		if l.released {
			return nil
		}
		return l.ended
	}
	if err := l.checkLocked(); err != nil {
		return err
	}
	pc := l.pc
	pg := pc.Conn().PgConn()
	usedTx, stale := l.txState()
	end := "COMMIT"
	if stale {
		end = "ROLLBACK"
	}
	// With labels, the label was set for the session (see labelSQL): the
	// pool's connection gets its own application_name back.
	sql, want := end, 1
	if l.b.labels {
		sql, want = end+"; RESET application_name", 2
	}
	tag, err := execTag(ctx, pg, sql, want)
	l.pc = nil
	l.finish()
	pc.Release() // back to the pool if idle, else the pool closes it
	switch {
	case err != nil && (pg.IsClosed() || fatal(err)):
		l.ended = fmt.Errorf("%w: pgadvisory: the connection broke during %s; the server ended the transaction and freed the lock: %w", driver.ErrLeaseLost, end, err)
		if usedTx && !stale {
			l.ended = fmt.Errorf("%w (%w: the writes made through Tx may or may not be committed)", l.ended, driver.ErrIndeterminate)
		}
		l.lost.mark()
		return l.ended
	case err != nil:
		// e.g. a deferred constraint or serialization failure at COMMIT.
		l.ended, l.released = driver.ErrReleased, true
		return fmt.Errorf("pgadvisory: %s of the lease's transaction failed; the writes made through Tx were rolled back (the lock is free): %w", end, err)
	case stale:
		l.ended = fmt.Errorf("%w: pgadvisory: the lease had ended or expired before Release: the writes made through Tx were rolled back", driver.ErrLeaseLost)
		return l.ended
	case tag != end:
		l.ended = fmt.Errorf("%w: pgadvisory: the lease's transaction had failed (%s answered %s): the writes made through Tx were rolled back", driver.ErrLeaseLost, end, tag)
		return l.ended
	}
	l.ended, l.released = driver.ErrReleased, true
	return nil
}

// txState reports whether Tx was used, and whether its portable lease has
// ended or passed its validity deadline (then its writes must not commit).
func (l *lease) txState() (used, stale bool) {
	l.txMu.Lock()
	t := l.tx
	l.txMu.Unlock()
	if t == nil {
		return false, false
	}
	if p := l.portable.Load(); p != nil {
		return true, p.Err() != nil || !time.Now().Before(p.ValidUntil())
	}
	return true, !time.Now().Before(l.localDeadline())
}

// localDeadline is, for a Tx obtained with Lease.As and not bound to its
// portable lease by Tx, a conservative stand-in for the portable lease's
// validity deadline: the last renewal's send time plus the TTL, less twice
// the portable layer's default drift (2 ms + 1% of the TTL). Callers hold
// sem.
func (l *lease) localDeadline() time.Time {
	ttl := time.Duration(l.ms) * time.Millisecond
	return l.renewed.Add(ttl - 2*(2*time.Millisecond+ttl/100))
}

// abandon ends the lease without a word to the server beyond closing the
// connection (a closing backend).
func (l *lease) abandon() { l.abandonWith(discard) }

func (l *lease) abandonWith(free func(*pgxpool.Conn)) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if l.acquire(ctx) != nil {
		l.breakConn()
		return
	}
	defer l.release()
	if l.ended != nil {
		return
	}
	pc := l.pc
	l.pc = nil
	l.ended = fmt.Errorf("%w: pgadvisory: %w", driver.ErrLeaseLost, driver.ErrClosed)
	l.finish()
	free(pc)
}

// breakConn closes the lease's socket without taking sem (a statement is in
// flight on it): the statement fails, the server ends the transaction, and
// whoever holds sem finds the connection closed.
func (l *lease) breakConn() {
	l.ncMu.Lock()
	defer l.ncMu.Unlock()
	if l.nc != nil {
		_ = l.nc.Close()
	}
}

// check is the watcher's look at an idle lease: if no statement is running
// and the server has closed the connection (a FATAL message, then EOF), the
// lease is lost. It sends nothing.
func (l *lease) check() {
	if !l.tryAcquire() {
		return // a statement is running; it will see a dead connection itself
	}
	defer l.release()
	if l.ended != nil {
		return
	}
	if l.checkLocked() != nil {
		return
	}
	pg := l.pc.Conn().PgConn()
	st := peekNone
	if pg.Frontend().ReadBufferLen() > 0 {
		st = peekData
	} else {
		st = peek(pg.Conn())
	}
	switch st {
	case peekClosed:
		_ = l.loseLocked("the server closed its connection (killed backend or idle timeout)", nil)
	case peekData:
		// An unsolicited message: a notice, a parameter change, or the FATAL
		// that precedes the server closing the connection.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := pg.ReceiveMessage(ctx); err != nil || pg.IsClosed() {
			_ = l.loseLocked("the server ended its session", err)
		}
	}
}

// execTag runs sql, statements without rows, on pg and returns the first
// one's command tag; an error if any failed or if they were not want. It
// reads the results without keeping them (as ReadAll would).
func execTag(ctx context.Context, pg *pgconn.PgConn, sql string, want int) (tag string, err error) {
	mrr := pg.Exec(ctx, sql)
	n := 0
	for mrr.NextResult() {
		ct, rerr := mrr.ResultReader().Close()
		if n == 0 {
			tag = ct.String()
		}
		if err == nil {
			err = rerr
		}
		n++
	}
	if cerr := mrr.Close(); cerr != nil {
		err = cerr
	}
	if err == nil && n != want {
		err = fmt.Errorf("pgadvisory: got %d results, want %d", n, want)
	}
	return tag, err
}

// resultErr checks that a multi-statement Exec gave want results, none
// failed, and that the last one has cols columns in one row (cols 0: no
// check).
func resultErr(rs []*pgconn.Result, want, cols int) error {
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	if len(rs) != want {
		return fmt.Errorf("pgadvisory: got %d results, want %d", len(rs), want)
	}
	if last := rs[want-1]; cols > 0 && (len(last.Rows) != 1 || len(last.Rows[0]) != cols) {
		return fmt.Errorf("pgadvisory: got an unexpected result shape %v", last.Rows)
	}
	return nil
}

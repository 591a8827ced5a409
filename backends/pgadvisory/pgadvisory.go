package pgadvisory

// Lease = transaction (internals; the package doc in doc.go has what users need).
//
// A grant is one round trip on a connection taken from the pool, which
// ends in the lease's transaction holding pg_advisory_xact_lock(<key>)
// with its TTL set:
//
//	BEGIN;
//	SELECT set_config('idle_in_transaction_session_timeout', '<TTL ms>', true),
//	       CASE WHEN pg_try_advisory_xact_lock(<key>) THEN pg_current_xact_id() END;
//
// is the query with the fence flush off; with it on (the default) the same
// query first makes the fence durable (see Fence, atop fence.go). The connection stays
// checked out, idle in that transaction, until the
// lease ends; each held lease and each waiting Acquire uses one connection
// of the pool, so size pool_max_conns for them (pgx's default is the larger
// of 4 and the number of CPUs), and PostgreSQL's max_connections: an open
// transaction pins a server connection, behind PgBouncer too, so for
// thousands of concurrent leases pick another backend. Release sends
// COMMIT: the lock is freed at once and the next waiter in the server's
// queue is granted in the same instant. A connection that dies (killed
// backend, crashed client, network cut noticed by TCP) ends the
// transaction, which frees the lock at once.
//
// Pool limits (internals; the package doc in doc.go has what users need).
//
// Blocked Acquires keep at most Config.MaxWaitConns connections (default
// half the pool, at least 1; URL max_wait_conns) waiting in the server's
// queue; an Acquire that finds them all in use polls with TryAcquire
// instead (5 to 250 ms apart) until one frees, so waiters on busy names
// never take every connection from unrelated names: a free name is granted
// at once. Held leases are not capped (each needs its connection). When
// every connection is checked out, an attempt waits at most
// Config.ConnTimeout (default DefaultConnTimeout, 5 s; URL conn_timeout)
// for one, or until its ctx ends if sooner, and then fails with an error
// wrapping ErrUnavailable that says the pool is exhausted, with how many
// connections held leases and waiters use: never a silent block, even
// with context.Background().
//
// TTL: the server ends a session that stays idle in its transaction longer
// than idle_in_transaction_session_timeout, which is set (SET LOCAL) to the
// lease's TTL in milliseconds, so a hung holder is cut off by the server
// itself: the server's clock decides. A renewal (Extend, automatic at TTL/3)
// is one statement on the lease's connection — an empty query, or set_config
// when the TTL changes — which resets the server's idle timer. The longest
// TTL is MaxTTL (the setting's limit, about 24.8 days).
//
// Blocking Acquire waits in the server's own lock queue (pg_advisory_lock
// with the fence flush on, see Fence atop fence.go; pg_advisory_xact_lock with it off;
// one FIFO queue for both): a waiter is granted the moment the holder
// commits, without polling. statement_timeout and lock_timeout are lifted
// for the wait and restored after it. A cancelled wait sends cancel requests
// until it ends, and nothing is left held. With the fence flush off, when
// the server answered every request (it has then signalled the session, so
// none can land later; one in flight gets answerWait after the wait
// ended), the connection is rolled back, a cancel still pending in the
// session is consumed, and it goes back to the pool (recycle, in the
// background: Acquire returns at once); otherwise, and always with the
// flush on, it is closed, so that no late cancel request can hit another
// user of that connection.
//
// PgBouncer (internals; the package doc in doc.go has what users need).
//
// Locks and settings are transaction-scoped, a grant's statements are
// prepared only where the pool's own queries are (its exec mode, see
// query.go: PgBouncer 1.21 and later tracks prepared statements; before
// it, one sets a mode such as simple_protocol, and the grants are then one
// simple query), and cancel requests go through PgBouncer, so the
// backend works behind PgBouncer in transaction pooling mode. The strict
// grant's session-level hold lasts only within one round trip (one simple
// query, or one pipeline ending in one Sync), for which PgBouncer keeps
// the server connection; the placeholder setting
// fencelock.held stays in the session, harmlessly. If that query fails
// between its two transactions, the backend asks the session to drop its
// session-level advisory locks (pg_advisory_unlock_all) before it closes
// the connection, since behind PgBouncer closing it does not end the server
// session.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// minTTL is the shortest lease TTL accepted. PostgreSQL keeps the idle
// timeout in milliseconds and fires it from a timer, exactly enough; but a
// lease renews at TTL/3 with a round trip on its connection and ends locally
// 2 ms + 1% before its TTL, so below 10 ms one scheduling hiccup costs it.
const minTTL = 10 * time.Millisecond

// MaxTTL is the longest lease TTL accepted: the largest
// idle_in_transaction_session_timeout, 2³¹−1 ms (about 24.8 days).
const MaxTTL = time.Duration(math.MaxInt32) * time.Millisecond

// Config configures the backend beyond fencelock.Options. The zero value
// is the default.
type Config struct {
	// NoFenceFlush skips the durable commit that makes each fence survive a
	// server crash (see the package doc), saving a WAL flush per grant.
	// Capabilities then declare FenceBestEffort. URL: fence_flush=false.
	NoFenceFlush bool
	// ConnTimeout bounds the wait for a free connection of the pool (every
	// held lease and every waiting Acquire keeps one checked out). Past it
	// the attempt fails with an error wrapping ErrUnavailable that says the
	// pool is exhausted, even under context.Background(); a ctx that ends
	// sooner ends the wait sooner. Default DefaultConnTimeout.
	// URL: conn_timeout=2s.
	ConnTimeout time.Duration
	// MaxWaitConns caps the pool connections that blocked Acquires may
	// keep while they wait in the server's queue, so that waiters on busy
	// names never take every connection from unrelated names. An Acquire
	// that finds the cap reached polls with TryAcquire (granted at once if
	// the name is free) until a waiting slot frees. Default: half the
	// pool's MaxConns, at least 1. URL: max_wait_conns=N.
	MaxWaitConns int
	// LabelAppName keeps each lease's label (AcquireOptions.Label) as its
	// session's application_name while it holds or waits, so that
	// Inspect (and package election's Leader and Observe) report it and
	// pg_stat_activity shows it. Off by default: it replaces the
	// application_name the pool's connections were opened with, which
	// monitoring and operators' scripts may use to find them (the
	// package's own tests find a client's sessions that way). Labels are
	// then at most 63 bytes of printable ASCII (Capabilities.Inspect).
	// URL: label_app_name=true.
	LabelAppName bool
}

// DefaultConnTimeout is Config.ConnTimeout's default.
const DefaultConnTimeout = 5 * time.Second

// New returns a Client that takes its locks in the PostgreSQL database of
// pool. cfg and opts may be nil (nil cfg: the defaults Config documents).
// New does no I/O; a nil pool or a negative Config field is an error
// matching fencelock.ErrInvalid.
//
// The Client does not own pool: Client.Close ends the Client's leases and
// goroutines, but leaves pool open for the caller to close after it.
func New(pool *pgxpool.Pool, cfg *Config, opts *fencelock.Options) (*fencelock.Client, error) {
	var err error
	switch {
	case pool == nil:
		err = fmt.Errorf("%w: pgadvisory.New with a nil pgxpool.Pool", fencelock.ErrInvalid)
	case cfg != nil && (cfg.ConnTimeout < 0 || cfg.MaxWaitConns < 0):
		err = fmt.Errorf("%w: pgadvisory.New: negative Config.ConnTimeout or Config.MaxWaitConns", fencelock.ErrInvalid)
	}
	if err != nil {
		return nil, &fencelock.Error{Op: "open", Backend: "pgadvisory", Err: err}
	}
	return fencelock.New(newBackend(pool, false, cfg), opts), nil
}

// backend is the driver. It implements driver.Backend, driver.Blocker and
// driver.Aser.
type backend struct {
	pool   *pgxpool.Pool
	owns   bool // Close closes pool (URL-opened)
	caps   driver.Capabilities
	strict bool // fence made durable before the grant returns (not Config.NoFenceFlush)
	labels bool // Config.LabelAppName
	watch  *watcher

	connTimeout time.Duration
	waitSlots   chan struct{} // one per blocked Acquire holding a connection (Config.MaxWaitConns)

	mu      sync.Mutex
	closed  bool
	ops     sync.WaitGroup             // acquires in flight
	waiting map[*pgxpool.Conn]struct{} // connections of blocked Acquires, for KillSessions
}

var (
	_ driver.Backend = (*backend)(nil)
	_ driver.Blocker = (*backend)(nil)
	_ driver.Aser    = (*backend)(nil)
	_ driver.Admin   = (*backend)(nil)
)

func newBackend(pool *pgxpool.Pool, owns bool, cfg *Config) *backend {
	b := &backend{pool: pool, owns: owns, watch: newWatcher(), connTimeout: DefaultConnTimeout, waiting: map[*pgxpool.Conn]struct{}{}}
	waiters := max(1, int(pool.Config().MaxConns)/2)
	if cfg != nil && cfg.ConnTimeout > 0 {
		b.connTimeout = cfg.ConnTimeout
	}
	if cfg != nil && cfg.MaxWaitConns > 0 {
		waiters = cfg.MaxWaitConns
	}
	b.waitSlots = make(chan struct{}, waiters)
	b.caps = driver.Capabilities{
		Backend:        "pgadvisory",
		Fence:          driver.FenceStrict,
		FenceSource:    "pg_current_xact_id() of a transaction committed durably (a WAL message, flushed) while the session held the lock, just before the lease's transaction began",
		MinTTL:         minTTL,
		TTLGranularity: time.Millisecond,
		TimeAuthority:  driver.TimeServer,
		Wait:           driver.WaitQueue,
		FIFO:           true,
		NodeLoss:       driver.NodeLossUnsafe,
		// The watcher sweeps the lease connections every watchBase (more
		// with many leases): a session the server ended is seen within
		// one sweep.
		LossSignal: lossSignal,
		// A waiter in the server's queue is granted the instant the lock
		// is freed (COMMIT, a session's end, its idle timeout); one over
		// MaxWaitConns polls at most slotPollMax apart.
		ReleaseWake: slotPollMax + 50*time.Millisecond,
		ExpiryWake:  slotPollMax + 50*time.Millisecond,
		// A broken connection ends the server session, which frees the
		// lock at once; the holder sees it at the watcher's next sweep.
		BreakOverlap: lossSignal,
		// pg_locks: held, and sessions queued; labels only with
		// Config.LabelAppName (below); no fence, no remaining TTL.
		Inspect: driver.InspectCaps{Supported: true, Waiters: true},
	}
	if cfg != nil && cfg.LabelAppName {
		b.labels = true
		b.caps.Inspect = driver.InspectCaps{
			Supported: true, Label: true, Waiters: true, Relabel: true, MaxLabel: maxLabel, LabelASCII: true,
			LabelWhere: "the holder session's application_name (set by the grant's own query, RESET at release), shown in pg_stat_activity; at most 63 bytes of ASCII",
		}
	}
	if cfg != nil && cfg.NoFenceFlush {
		b.caps.Fence = driver.FenceBestEffort
		b.caps.FenceSource = "pg_current_xact_id() of the lease's transaction (xid8); may repeat after a server crash (fence flush off)"
	} else {
		b.strict = true
	}
	return b
}

func (b *backend) Capabilities() driver.Capabilities { return b.caps }

// As sets *target to the pool for target type **pgxpool.Pool.
func (b *backend) As(target any) bool {
	if p, ok := target.(**pgxpool.Pool); ok {
		*p = b.pool
		return true
	}
	return false
}

// Close stops the watcher, closes the connections of
// leases still held (the server frees their locks at once), and closes the
// pool if the backend opened it.
func (b *backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.ops.Wait()
	for _, l := range b.watch.close() {
		l.abandon()
	}
	if b.owns {
		b.pool.Close()
	}
	return nil
}

// begin registers an acquire in flight; false once closed.
func (b *backend) begin() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.ops.Add(1)
	return true
}

// conn takes a connection from the pool, waiting at most the connection
// timeout. A pool with every connection checked out (by held leases and
// waiting acquires) yields an error wrapping ErrUnavailable that says so
// (and ctx's error too if ctx ended first).
func (b *backend) conn(ctx context.Context) (*pgxpool.Conn, error) {
	actx, cancel := context.WithTimeoutCause(ctx, b.connTimeout, errConnTimeout)
	defer cancel()
	pc, err := b.pool.Acquire(actx)
	if err == nil {
		return pc, nil
	}
	st := b.pool.Stat()
	if actx.Err() != nil && st.AcquiredConns() >= st.MaxConns() {
		b.mu.Lock()
		w := len(b.waiting)
		b.mu.Unlock()
		exhausted := fmt.Errorf("%w: pgadvisory: no free connection in the pool: all %d are checked out (%d by held leases, %d by waiting acquires, the rest by other users of the pool); raise pool_max_conns (or Config.ConnTimeout), or hold fewer locks at once",
			driver.ErrUnavailable, st.MaxConns(), b.watch.len(), w)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%w)", ctxErr(ctx), exhausted)
		}
		return nil, exhausted
	}
	return nil, storeErr(ctx, "get a connection from the pool", err)
}

// errConnTimeout is the cause of a wait for a pool connection that ran out.
var errConnTimeout = errors.New("pgadvisory: connection timeout")

// cleanupTimeout bounds the ROLLBACK or close that frees a connection after
// a failed or cancelled acquire, on a context detached from the caller's,
// and how long a statement may still run after its caller's ctx ended (see
// execDetached).
const cleanupTimeout = 2 * time.Second

// discard closes pc's connection (the server ends its transaction and frees
// any lock in it) and returns it to the pool, which drops it.
func discard(pc *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = pc.Conn().PgConn().Close(ctx)
	pc.Release()
}

// rollback ends pc's transaction and returns pc to the pool; if that fails
// the connection is closed instead.
func rollback(pc *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	pg := pc.Conn().PgConn()
	if pg.IsClosed() || pg.Exec(ctx, "ROLLBACK").Close() != nil || pg.TxStatus() != 'I' {
		_ = pg.Close(ctx)
	}
	pc.Release()
}

func ttlMillis(ttl time.Duration) (int64, error) {
	if ttl <= 0 || ttl > MaxTTL {
		return 0, fmt.Errorf("%w: TTL %v: PostgreSQL's idle_in_transaction_session_timeout takes 1ms to %v: pass a TTL in that range and renew", driver.ErrInvalid, ttl, MaxTTL)
	}
	ms := (ttl + time.Millisecond - 1) / time.Millisecond // round up: the server never cuts earlier than the TTL
	return int64(ms), nil
}

// TryAcquire implements driver.Backend: one round trip tries the lock,
// makes the fence durable (strict) and opens the lease transaction; a miss
// costs a second one (ROLLBACK). When it returns an error nothing is held:
// a connection whose state is unknown is closed, which ends its session.
func (b *backend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	ms, err := ttlMillis(req.TTL)
	if err != nil {
		return nil, err
	}
	if !b.begin() {
		return nil, driver.ErrClosed
	}
	defer b.ops.Done()
	key := Key(req.Name)
	pc, err := b.conn(ctx)
	if err != nil {
		return nil, err
	}
	q, lay := tryQuery, tryLayout
	if b.strict {
		q, lay = tryStrictQuery, tryStrictLayout
	}
	label := b.label(req)
	run, err := b.send(ctx, pc, label, q, grantArgs(key, ms))
	sent := time.Now()
	var fv []byte
	if err == nil {
		var rs []*pgconn.Result
		rs, err = runDetached(ctx, run)
		rs = dropLabelResult(label, rs)
		if err == nil {
			fv, err = lay.fenceIn(rs)
		}
	}
	if err != nil {
		b.discard(pc)
		err = storeErr(ctx, "try to take the lock", err)
		if ctx.Err() != nil {
			// No reply within cleanupTimeout after ctx ended: the server
			// frees the lock when it notices the closed connection.
			err = fmt.Errorf("%w: %w", driver.ErrIndeterminate, err)
		}
		return nil, err
	}
	if fv == nil {
		rollback(pc)
		return nil, fmt.Errorf("%w (advisory lock key %d is held by another session)", driver.ErrNotAcquired, key)
	}
	if ctx.Err() != nil {
		// Granted, but the caller has gone: free it, confirmed.
		rollback(pc)
		return nil, ctxErr(ctx)
	}
	l, err := b.grant(pc, req, key, fv, ms, sent)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// tryQuery is TryAcquire's query when the fence flush is off (see
// tryLayout).
var tryQuery = newQuery(
	"BEGIN", nil,
	"SELECT set_config('idle_in_transaction_session_timeout', $1::text, true),"+
		" CASE WHEN pg_try_advisory_xact_lock($2::bigint) THEN pg_current_xact_id()::text END", []int{argTTL, argKey},
)

// Acquire implements driver.Blocker: the wait is the server's FIFO lock
// queue, so a waiter is granted the moment the holder commits.
func (b *backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	ms, err := ttlMillis(req.TTL)
	if err != nil {
		return nil, time.Time{}, err
	}
	if !b.begin() {
		return nil, time.Time{}, driver.ErrClosed
	}
	defer b.ops.Done()
	if l, sent, err := b.waitSlot(ctx, req); l != nil || err != nil {
		return l, sent, err
	}
	defer func() { <-b.waitSlots }()
	for attempt := 1; ; attempt++ {
		l, sent, err := b.acquireOnce(ctx, req, ms)
		if errors.Is(err, errCutBeforeReturn) && ctx.Err() == nil && attempt < maxCutRetries {
			continue // nobody saw that grant: wait again
		}
		if errors.Is(err, errCutBeforeReturn) {
			return nil, time.Time{}, fmt.Errorf("%w: %w %d times in a row: the TTL %v is too short for this server's round trips; use a longer TTL", driver.ErrUnavailable, err, attempt, req.TTL)
		}
		if err != nil {
			return nil, time.Time{}, err
		}
		return l, sent, nil
	}
}

// Poll intervals of an Acquire that waits for a waiting slot.
const (
	slotPollMin = 5 * time.Millisecond
	slotPollMax = 250 * time.Millisecond
)

// waitSlot takes one of the Config.MaxWaitConns waiting slots (all
// results zero). While every slot is in use it polls with TryAcquire
// instead, so a free name is granted at once whatever other names' waiters
// do: then it returns that grant and the time its request was sent.
// Otherwise it returns the error that ended the wait.
func (b *backend) waitSlot(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	select {
	case b.waitSlots <- struct{}{}:
		return nil, time.Time{}, nil
	default:
	}
	for delay := slotPollMin; ; delay = min(2*delay, slotPollMax) {
		sent := time.Now()
		l, err := b.TryAcquire(ctx, req)
		if err == nil {
			return l, sent, nil
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			return nil, time.Time{}, err
		}
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case b.waitSlots <- struct{}{}:
			t.Stop()
			return nil, time.Time{}, nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, time.Time{}, ctxErr(ctx)
		}
	}
}

// maxCutRetries bounds how often Acquire waits again after the server cut
// its grant before it could be returned.
const maxCutRetries = 3

// errCutBeforeReturn: the server cut a grant (its idle timeout) before
// Acquire could return it: the renewal that restarts the TTL after a long
// wait came too late.
var errCutBeforeReturn = errors.New("pgadvisory: the server cut the grant before it was returned")

// acquireOnce waits once in the server's queue.
func (b *backend) acquireOnce(ctx context.Context, req driver.AcquireRequest, ms int64) (*lease, time.Time, error) {
	key := Key(req.Name)
	pc, err := b.conn(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer b.markWaiting(pc)()
	rs, lay, sent, w, err := b.wait(ctx, pc, b.label(req), grantArgs(key, ms))
	if ctx.Err() != nil {
		b.afterCancel(pc, w)
		return nil, time.Time{}, ctxErr(ctx)
	}
	w.settle() // nothing to wait for: no cancel request was sent
	var fv []byte
	if err == nil {
		fv, err = lay.fenceIn(rs)
	}
	if err != nil {
		b.discard(pc)
		return nil, time.Time{}, storeErr(ctx, "wait for the lock", err)
	}
	l, err := b.grant(pc, req, key, fv, ms, sent)
	if err != nil {
		return nil, time.Time{}, err
	}
	return restartTTL(ctx, l, req.TTL, sent)
}

// wait sends the wait query on pc (label's statement first, if any) and
// returns its results, their layout, and when it was sent. With the fence
// flush off, on a connection whose last wait found the session's
// statement_timeout and lock_timeout at 0 (foldWait), it sends
// foldedWaitQuery; if that finds a setting changed since (it then took
// nothing), it rolls back and sends waitQuery. w is the wait's watch,
// which the caller settles (see execWait).
func (b *backend) wait(ctx context.Context, pc *pgxpool.Conn, label string, args [][]byte) (rs []*pgconn.Result, lay layout, sent time.Time, w *waitWatch, err error) {
	pg := pc.Conn().PgConn()
	check := serverMajor(pg.ParameterStatus("server_version")) >= 14
	folded := !b.strict && foldWait(pg)
	q := waitQuery(b.strict, check)
	lay = waitLayout
	switch {
	case b.strict:
		lay = waitStrictLayout
	case folded:
		q, lay = foldedWaitQuery(check), foldedWaitLayout
	}
	run, err := b.send(ctx, pc, label, q, args)
	if err != nil {
		return nil, lay, time.Time{}, &waitWatch{}, err
	}
	rs, sent, w, err = execWait(ctx, run, !b.strict)
	rs = dropLabelResult(label, rs)
	if err != nil || b.strict || ctx.Err() != nil {
		return rs, lay, sent, w, err
	}
	if !folded {
		// The restore column is NULL when nothing was lifted: both
		// timeouts were 0, and the check interval is now set.
		setFoldWait(pg, resultErr(rs, lay.results, lay.lastCols) == nil && rs[2].Rows[0][1] == nil)
		return rs, lay, sent, w, nil
	}
	if resultErr(rs, lay.results, 0) != nil || len(rs[1].Rows) != 0 {
		return rs, lay, sent, w, nil
	}
	setFoldWait(pg, false)
	if !w.settle() {
		return nil, lay, sent, w, errors.New("pgadvisory: a cancel request is unanswered") // unreachable: ctx has not ended
	}
	if _, err := execDetached(ctx, pg, "ROLLBACK"); err != nil {
		return nil, lay, sent, w, err
	}
	return b.wait(ctx, pc, label, args)
}

// foldWaitKey is the key, in a connection's pgconn CustomData, of whether
// the last wait on it found the session needing no settings lifted: then
// the next wait sends foldedWaitQuery, which checks that again itself. A
// new connection (a new PgConn) starts without it.
const foldWaitKey = "fencelock.foldWait"

func foldWait(pg *pgconn.PgConn) bool {
	v, _ := pg.CustomData()[foldWaitKey].(bool)
	return v
}

func setFoldWait(pg *pgconn.PgConn, v bool) { pg.CustomData()[foldWaitKey] = v }

// markWaiting counts pc among the connections waiting in the server's
// queue until the returned func is called.
func (b *backend) markWaiting(pc *pgxpool.Conn) (unmark func()) {
	b.mu.Lock()
	b.waiting[pc] = struct{}{}
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		delete(b.waiting, pc)
		b.mu.Unlock()
	}
}

// execWait runs the wait query q and returns its results, when it was
// sent, and its watch, done sending cancel requests, which the caller
// settles (waitWatch.settle) before the connection's next use; keep: the
// connection may be kept after a cancel (else a request in flight is cut
// short at once, the connection being closed anyway).
//
// The wait runs detached from ctx (pgx watches no context): when ctx ends
// we ask the server to cancel it (the connection survives), and only if
// that does not end it within cancelGrace is the connection broken, by a
// deadline on its socket (see waitWatch).
func execWait(ctx context.Context, q pending, keep bool) (rs []*pgconn.Result, sent time.Time, w *waitWatch, err error) {
	w = &waitWatch{pg: q.pg, keep: keep}
	unwatch := context.AfterFunc(ctx, w.cancel)
	sent = time.Now()
	rs, err = readAll(q.run(context.Background()))
	unwatch()
	w.finish()
	return rs, sent, w, err
}

// afterCancel frees pc after a wait whose ctx ended: granted or not,
// nothing may stay held. With the fence flush off it settles the wait's
// watch in the background, tracked by b.ops (Close waits for it), so that
// Acquire returns at once: then, if every cancel request was answered,
// recycle rolls the connection back and returns it to the pool. Otherwise
// closing the connection ends the session (and keeps a late cancel request
// from reaching a later user of it).
func (b *backend) afterCancel(pc *pgxpool.Conn, w *waitWatch) {
	if b.strict || !w.keep {
		w.settle()
		b.discard(pc)
		return
	}
	b.ops.Add(1) // within this Acquire's own: legal while Close waits
	go func() {
		defer b.ops.Done()
		if w.settle() {
			recycle(pc)
		} else {
			b.discard(pc)
		}
	}()
}

// waitWatch cancels a wait whose ctx ended (see execWait).
type waitWatch struct {
	pg   *pgconn.PgConn
	keep bool // the connection may be kept: wait answerWait for an answer

	mu        sync.Mutex
	finished  bool               // the wait is over: send nothing more
	over      chan struct{}      // closed by stop: cancel sends no more requests
	cancelled chan struct{}      // closed when cancel has returned
	endCancel context.CancelFunc // cuts a request in flight short
	answered  bool               // every request cancel sent was answered (read after cancelled)
}

// cancel asks the server to cancel the wait until it is over, for at most
// cancelGrace, when the socket's deadline (set now) breaks the
// connection. A cancel request that reaches the server before the query
// does is ignored, so it repeats the request every cancelRetry. The
// server answers a request (closes its connection) once it has signalled
// the session, so that, when every one was answered, none can reach the
// session later (see recycle); one still unanswered answerWait after the
// wait ended is cut short (then the connection is closed: see stop).
func (w *waitWatch) cancel() {
	w.mu.Lock()
	if w.finished {
		w.mu.Unlock()
		return
	}
	_ = w.pg.Conn().SetDeadline(time.Now().Add(cancelGrace))
	cctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
	defer cancel()
	w.over, w.cancelled, w.endCancel = make(chan struct{}), make(chan struct{}), cancel
	over, cancelled := w.over, w.cancelled
	w.mu.Unlock()
	defer close(cancelled)
	clean := true // every request answered: the server closed its end
	for {
		if err := w.pg.CancelRequest(cctx); err != nil {
			clean = false // cut short, or broken after it was sent: it may still land
		}
		if cctx.Err() != nil {
			return // the request may have been cut short
		}
		t := time.NewTimer(cancelRetry)
		select {
		case <-over:
			t.Stop()
			w.answered = clean
			return
		case <-cctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// finish marks the wait over: no cancel request is sent after it
// returns.
func (w *waitWatch) finish() {
	w.mu.Lock()
	w.finished = true
	over := w.over
	w.mu.Unlock()
	if over != nil {
		close(over)
	}
}

// settle, after finish, waits for the answer to a cancel request in
// flight (cutting it short after answerWait, at once if not keep), clears
// a deadline set on a connection that survived, and reports whether the
// wait is clean: no request sent, or every one answered, so that none
// can reach the session later.
func (w *waitWatch) settle() (clean bool) {
	w.mu.Lock()
	cancelled, end := w.cancelled, w.endCancel
	w.mu.Unlock()
	if cancelled == nil {
		return true
	}
	wait := time.Duration(0)
	if w.keep {
		wait = answerWait
	}
	t := time.NewTimer(wait)
	select {
	case <-cancelled:
	case <-t.C:
		end() // not answered: it may still land, so the connection will be closed
		<-cancelled
	}
	t.Stop()
	if !w.pg.IsClosed() {
		_ = w.pg.Conn().SetDeadline(time.Time{})
	}
	return w.answered
}

// recycle returns pc to the pool after a wait cancelled with the fence
// flush off, whose cancel requests were all answered (execWait): no more
// can reach the session. It sends ROLLBACK, which ends the wait's
// transaction (and frees the lock if it was granted), then pg_sleep(0),
// whose first act is to check for interrupts: a cancel the session was
// signalled but has not acted on yet (PostgreSQL keeps one flag for any
// number of them) cancels it instead of a later user's statement. Both go
// as one simple query, so that behind PgBouncer they run on one server
// session. A query so cancelled is sent again, at most recycleTries
// times; anything else closes the connection (discard).
func recycle(pc *pgxpool.Conn) {
	pg := pc.Conn().PgConn()
	if pg.IsClosed() || pg.Conn().SetDeadline(time.Now().Add(cleanupTimeout)) != nil {
		discard(pc)
		return
	}
	for range recycleTries {
		_, err := execDetached(context.Background(), pg, "ROLLBACK; SELECT pg_sleep(0)")
		if err == nil && pg.TxStatus() == 'I' && pg.Conn().SetDeadline(time.Time{}) == nil {
			pc.Release()
			return
		}
		var pgErr *pgconn.PgError
		if pg.IsClosed() || !errors.As(err, &pgErr) || pgErr.Code != codeQueryCanceled {
			break
		}
	}
	discard(pc)
}

// recycleTries bounds the ROLLBACKs of recycle; codeQueryCanceled is
// the SQLSTATE of a cancelled statement.
const (
	recycleTries      = 3
	codeQueryCanceled = "57014"
)

// restartTTL returns l granted by a wait sent at sent, and when its TTL
// started. The server's idle timer started when the granting statement
// ended, not when it was sent: after a long wait it restarts it now, so
// that the lease's validity does not start in the past. If that fails, l
// is abandoned.
func restartTTL(ctx context.Context, l *lease, ttl time.Duration, sent time.Time) (*lease, time.Time, error) {
	if time.Since(sent) <= ttl/4 {
		return l, sent, nil
	}
	renewed := time.Now()
	if err := l.Extend(ctx, ttl); err != nil {
		l.abandon()
		if errors.Is(err, driver.ErrLeaseLost) {
			return nil, time.Time{}, fmt.Errorf("%w: %w", errCutBeforeReturn, err)
		}
		return nil, time.Time{}, storeErr(ctx, "start the TTL after the wait", err)
	}
	return l, renewed, nil
}

// cancelGrace bounds how long a cancelled wait waits for the server to
// honour its cancel requests, sent every cancelRetry, before it breaks the
// connection.
const (
	cancelGrace = 2 * time.Second
	cancelRetry = 50 * time.Millisecond
	// answerWait bounds how long a wait that ended waits for the answer
	// to a cancel request in flight (see waitWatch.cancel): the server
	// answers one that ended the wait as it ends it, and a fresh
	// connection costs more (a dial: 16–21 ms on a 2-core VM, several
	// times that when a burst of cancels loads it).
	answerWait = 250 * time.Millisecond
)

// grant turns a granted transaction into a lease: it parses the fence and
// starts watching the connection.
func (b *backend) grant(pc *pgxpool.Conn, req driver.AcquireRequest, key int64, fv []byte, ms int64, sent time.Time) (*lease, error) {
	fence, err := strconv.ParseInt(string(fv), 10, 64)
	if err != nil || fence <= 0 {
		discard(pc)
		return nil, fmt.Errorf("pgadvisory: pg_current_xact_id() returned %q, not a positive int64", fv)
	}
	l := newLease(b, pc, req.Name, key, driver.Fence(fence), ms, sent)
	b.watch.add(l)
	return l, nil
}

// serverMajor parses the major version from server_version ("15.8 (Debian
// ...)" → 15); 0 if unknown.
func serverMajor(v string) int {
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	n, _ := strconv.Atoi(v[:i])
	return n
}

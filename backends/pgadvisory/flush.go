package pgadvisory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/driver"
)

// flusher makes fences durable: each round commits one transactional WAL
// message on the flusher's own connection (not the pool's: with the pool
// exhausted by held leases and waiters, a grant that needed a pool
// connection to finish could wait forever). A round serves every grant that
// asked before it started, so its transaction ID, and the WAL flushed with
// its commit, come after theirs (group commit). At most one round runs at a
// time, on the first waiter's goroutine or, for those who queued behind it,
// on a goroutine that exits when none wait.
type flusher struct {
	pool *pgxpool.Pool

	mu      sync.Mutex
	pending []chan error
	running bool
	closed  bool
	warmed  bool // warm ran once
	wg      sync.WaitGroup

	conn *pgx.Conn     // used by the running round only; closed by close
	pidv atomic.Uint32 // server PID of conn, for KillSessions
}

// flushTimeout bounds one round, connecting included.
const flushTimeout = 10 * time.Second

func newFlusher(pool *pgxpool.Pool) *flusher { return &flusher{pool: pool} }

// wait returns once a round that started after the call has committed, or
// with its error, or ctx's. If no round is running the caller runs one
// itself (no goroutine hop on the common, uncontended path); requests that
// arrive meanwhile are served by a goroutine, one round at a time.
func (f *flusher) wait(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return driver.ErrClosed
	}
	if f.running {
		ch := make(chan error, 1)
		f.pending = append(f.pending, ch)
		f.mu.Unlock()
		select {
		case err := <-ch:
			return err
		case <-ctx.Done():
			return ctxErr(ctx)
		}
	}
	f.running = true
	f.wg.Add(1)
	f.mu.Unlock()
	err := f.round(ctx)
	f.mu.Lock()
	more := len(f.pending) > 0
	if !more {
		f.running = false
	}
	f.mu.Unlock()
	if more {
		go f.loop() // inherits running and the wait group count
	} else {
		f.wg.Done()
	}
	return err
}

// warm connects ahead of the first grant, while its lock statement is in
// flight, so that the first grant does not pay for the connection.
func (f *flusher) warm() {
	f.mu.Lock()
	if f.closed || f.running || f.warmed {
		f.mu.Unlock()
		return
	}
	f.warmed, f.running = true, true
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		if c, err := f.connect(ctx); err == nil {
			f.conn = c
			f.pidv.Store(c.PgConn().PID())
		}
		cancel()
		f.loop()
	}()
}

// loop runs rounds for pending requests until there are none; the caller
// has set running and added to wg.
func (f *flusher) loop() {
	defer f.wg.Done()
	for {
		f.mu.Lock()
		batch := f.pending
		f.pending = nil
		if len(batch) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		err := f.round(context.Background())
		for _, ch := range batch {
			ch <- err
		}
	}
}

// round commits one WAL message, reconnecting once if the connection it
// had kept turns out to be broken (a server restart, an idle cut).
func (f *flusher) round(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		fresh := false
		if f.conn == nil || f.conn.IsClosed() {
			c, err := f.connect(ctx)
			if err != nil {
				return err
			}
			f.conn, fresh = c, true
			f.pidv.Store(c.PgConn().PID())
		}
		err := f.conn.PgConn().Exec(ctx, "SELECT pg_logical_emit_message(true, 'fencelock', '')").Close()
		if err == nil {
			return nil
		}
		_ = f.conn.Close(ctx)
		f.conn = nil
		if fresh || attempt > 0 {
			return err
		}
	}
}

// pid is the server PID of the flush connection, or 0.
func (f *flusher) pid() uint32 { return f.pidv.Load() }

// connect opens a connection with the pool's settings and hooks, with
// synchronous_commit not off (else the commit would not wait for the WAL
// flush that makes the fence durable).
func (f *flusher) connect(ctx context.Context) (*pgx.Conn, error) {
	c, err := connectLike(ctx, f.pool)
	if err != nil {
		return nil, err
	}
	err = c.PgConn().Exec(ctx, "SELECT set_config('synchronous_commit', 'local', false) WHERE current_setting('synchronous_commit') = 'off'").Close()
	if err != nil {
		_ = c.Close(ctx)
		return nil, err
	}
	return c, nil
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

// close waits for the running round and closes the connection; later waits
// return ErrClosed.
func (f *flusher) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.wg.Wait()
	if f.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = f.conn.Close(ctx)
		f.conn = nil
	}
}

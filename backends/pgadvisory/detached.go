package pgadvisory

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// execDetached runs sql on pg and reads every result. The statement is not
// interrupted when ctx ends (pgx would close the connection: a lease's
// connection, or one whose lock grant would then be unknown): it gets
// cleanupTimeout more to answer, and only then is the connection broken.
// The caller checks ctx.Err() afterwards.
//
// pgx is handed a context that never ends, so it watches nothing; the
// backstop is a deadline on the socket, set only once ctx has ended (what
// pgx's own DeadlineContextWatcherHandler does, delayed by cleanupTimeout).
// A ctx that cannot end (context.Background) costs nothing.
func execDetached(ctx context.Context, pg *pgconn.PgConn, sql string) ([]*pgconn.Result, error) {
	return runDetached(ctx, pending{pg: pg, sql: sql})
}

// runDetached is execDetached of q (see backend.send).
func runDetached(ctx context.Context, q pending) ([]*pgconn.Result, error) {
	g := watchDeadline(ctx, q.pg, cleanupTimeout)
	rs, err := readAll(q.run(context.Background())) // pgx watches no context
	g.stop()
	return rs, err
}

// deadlineGuard sets a deadline on a connection's socket, delay after a
// ctx ends, for as long as a statement runs; see watchDeadline.
type deadlineGuard struct {
	pg      *pgconn.PgConn
	delay   time.Duration
	unwatch func() bool

	mu       sync.Mutex
	finished bool // the statement is over: set no deadline
	set      bool // a deadline was set: clear it
}

// watchDeadline sets pg's socket deadline to delay after ctx ends, until
// stop is called. Nil (nothing to stop) if ctx cannot end.
func watchDeadline(ctx context.Context, pg *pgconn.PgConn, delay time.Duration) *deadlineGuard {
	if ctx.Done() == nil {
		return nil
	}
	g := &deadlineGuard{pg: pg, delay: delay}
	g.unwatch = context.AfterFunc(ctx, g.fire)
	return g
}

func (g *deadlineGuard) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.finished {
		_ = g.pg.Conn().SetDeadline(time.Now().Add(g.delay))
		g.set = true
	}
}

// stop ends the watch: a deadline set while the statement ran, which did
// not break the connection, is cleared so that the next statement has none.
func (g *deadlineGuard) stop() {
	if g == nil {
		return
	}
	g.unwatch()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.finished = true
	if g.set && !g.pg.IsClosed() {
		_ = g.pg.Conn().SetDeadline(time.Time{})
	}
}

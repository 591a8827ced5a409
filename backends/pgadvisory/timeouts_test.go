package pgadvisory_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
)

// TestTimeoutsRestoredPerWait: the statement_timeout and lock_timeout a
// blocking Acquire lifts are restored to the session's values of that
// wait, not of an earlier wait on the same session: one session (a pool of
// one connection) waits with 50ms/40ms, then with 0/0 after a SET, then
// with 30ms/0 after another, and its lease's transaction sees each time
// the session's own values (the flush on and off).
func TestTimeoutsRestoredPerWait(t *testing.T) {
	for _, mode := range []string{"", "&fence_flush=false"} {
		t.Run("params="+mode, func(t *testing.T) {
			e := newEnv(t)
			a, b := e.client(mode[min(1, len(mode)):]), e.client("statement_timeout=50ms&lock_timeout=40ms&pool_max_conns=1"+mode)
			var pool *pgxpool.Pool
			if !b.As(&pool) {
				t.Fatal("Client.As(**pgxpool.Pool): false")
			}
			name := e.name()
			for _, c := range []struct{ set, st, lt string }{
				{"", "50ms", "40ms"},
				{"SET statement_timeout = 0; SET lock_timeout = 0", "0", "0"},
				{"SET statement_timeout = '30ms'", "30ms", "0"},
			} {
				if c.set != "" {
					if _, err := pool.Exec(e.ctx, c.set); err != nil {
						t.Fatal(err)
					}
				}
				st, lt := waitedTimeouts(e, a, b, name)
				if st != c.st || lt != c.lt {
					t.Fatalf("after %q, in the lease's transaction statement_timeout=%s lock_timeout=%s, want the session's %s, %s", c.set, st, lt, c.st, c.lt)
				}
			}
		})
	}
}

// waitedTimeouts has b wait in the server's queue for name while a holds
// it, and returns statement_timeout and lock_timeout as b's lease's
// transaction sees them.
func waitedTimeouts(e *env, a, b *fencelock.Client, name string) (st, lt string) {
	e.t.Helper()
	l1, err := a.TryAcquire(e.ctx, name, opts(30*time.Second, false))
	if err != nil {
		e.t.Fatal(err)
	}
	got := acquireAsync(e.ctx, b, name, opts(30*time.Second, false))
	e.waitFor(5*time.Second, "waiter queued", func() (bool, error) { n, err := e.waiters(pgadvisory.Key(name)); return n == 1, err })
	if err := l1.Release(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		e.t.Fatal(r.err)
	}
	defer func() {
		if err := r.l.Release(e.ctx); err != nil {
			e.t.Fatal(err)
		}
	}()
	tx, ok := pgadvisory.Tx(r.l)
	if !ok {
		e.t.Fatal("Tx: false")
	}
	if err := tx.QueryRow(e.ctx, "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')").Scan(&st, &lt); err != nil {
		e.t.Fatal(err)
	}
	return st, lt
}

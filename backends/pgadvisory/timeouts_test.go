package pgadvisory_test

import (
	"slices"
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
	v := waitedSettings(e, a, b, name, 0, "statement_timeout", "lock_timeout")
	return v[0], v[1]
}

// waitedSettings has b wait in the server's queue for name while a holds
// it for at least hold after b queued, and returns the settings named as
// b's lease's transaction sees them.
func waitedSettings(e *env, a, b *fencelock.Client, name string, hold time.Duration, settings ...string) []string {
	e.t.Helper()
	l1, err := a.TryAcquire(e.ctx, name, opts(30*time.Second, false))
	if err != nil {
		e.t.Fatal(err)
	}
	got := acquireAsync(e.ctx, b, name, opts(30*time.Second, false))
	e.waitFor(5*time.Second, "waiter queued", func() (bool, error) { n, err := e.waiters(pgadvisory.Key(name)); return n == 1, err })
	// The wait must outlast the timeouts under test: nothing to signal.
	time.Sleep(hold)
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
	var v []string
	if err := tx.QueryRow(e.ctx, "SELECT array_agg(current_setting(s) ORDER BY i) FROM unnest($1::text[]) WITH ORDINALITY AS t(s, i)", settings).Scan(&v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

// TestWaitAfterSettingsChange: with the fence flush off, a session whose
// last wait found its timeouts at 0 folds the next wait's settings into
// the lock's statement (foldedWaitQuery); when the session's
// statement_timeout, lock_timeout or client_connection_check_interval
// were changed since (here by a SET on the pool's one connection), the
// wait still outlasts the timeouts, has the client check on, and the
// lease's transaction sees the session's own timeouts; and the folded
// wait (no SET) has them too, with the TTL set. With prepared statements,
// as one simple query, and with labels (whose statement precedes BEGIN).
func TestWaitAfterSettingsChange(t *testing.T) {
	for _, mode := range []string{"", "&default_query_exec_mode=simple_protocol", "&label_app_name=true"} {
		t.Run("params="+mode, func(t *testing.T) { waitAfterSettingsChange(t, mode) })
	}
}

func waitAfterSettingsChange(t *testing.T, mode string) {
	e := newEnv(t)
	a, b := e.client("fence_flush=false"), e.client("pool_max_conns=1&fence_flush=false"+mode)
	var pool *pgxpool.Pool
	if !b.As(&pool) {
		t.Fatal("Client.As(**pgxpool.Pool): false")
	}
	name := e.name()
	settings := []string{"statement_timeout", "lock_timeout", "client_connection_check_interval", "idle_in_transaction_session_timeout"}
	for _, c := range []struct{ set, st, lt string }{
		{"", "0", "0"}, // the folded wait itself
		{"SET statement_timeout = '50ms'", "50ms", "0"},
		{"SET lock_timeout = '50ms'", "0", "50ms"},
		{"SET client_connection_check_interval = 0", "0", "0"},
	} {
		waitedTimeouts(e, a, b, name) // timeouts 0: the next wait folds
		if c.set != "" {
			if _, err := pool.Exec(e.ctx, c.set); err != nil {
				t.Fatal(err)
			}
		}
		got := waitedSettings(e, a, b, name, 200*time.Millisecond, settings...)
		if want := []string{c.st, c.lt, "1s", "30s"}; !slices.Equal(got, want) {
			t.Fatalf("after %q, in the lease's transaction %v = %v, want %v", c.set, settings, got, want)
		}
		if _, err := pool.Exec(e.ctx, "RESET statement_timeout; RESET lock_timeout"); err != nil {
			t.Fatal(err)
		}
	}
}

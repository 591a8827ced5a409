package pgadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
)

// table makes a one-row table (id 1, v 0) unique to the test.
func (e *env) table() pgx.Identifier {
	e.t.Helper()
	tab := pgx.Identifier{"tx_" + randHex(6)}
	_, err := e.admin.Exec(e.ctx, "CREATE TABLE "+tab.Sanitize()+" (id int PRIMARY KEY, v int NOT NULL); INSERT INTO "+tab.Sanitize()+" VALUES (1, 0)")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _, _ = e.admin.Exec(context.Background(), "DROP TABLE "+tab.Sanitize()) })
	return tab
}

func (e *env) value(tab pgx.Identifier) int {
	e.t.Helper()
	var v int
	if err := e.admin.QueryRow(e.ctx, "SELECT v FROM "+tab.Sanitize()+" WHERE id = 1").Scan(&v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *env) leaseTx(c *fencelock.Client, o *fencelock.AcquireOptions) (*fencelock.Lease, pgx.Tx) {
	e.t.Helper()
	l, err := c.TryAcquire(e.ctx, e.name(), o)
	if err != nil {
		e.t.Fatal(err)
	}
	tx, ok := pgadvisory.Tx(l)
	if !ok {
		e.t.Fatal("Tx(lease) = false for a held lease")
	}
	return l, tx
}

// TestTxCommitsWithRelease: writes through Tx are invisible until Release,
// which commits them; Commit and Rollback of the Tx are the lease's.
func TestTxCommitsWithRelease(t *testing.T) {
	e := newEnv(t)
	tab := e.table()
	l, tx := e.leaseTx(e.client(""), nil)
	if _, err := tx.Exec(e.ctx, "UPDATE "+tab.Sanitize()+" SET v = v + 1 WHERE id = $1", 1); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(tx.Commit(e.ctx), pgadvisory.ErrTxOwned) || !errors.Is(tx.Rollback(e.ctx), pgadvisory.ErrTxOwned) {
		t.Fatal("Commit/Rollback of the lease's Tx must return ErrTxOwned")
	}
	if v := e.value(tab); v != 0 {
		t.Fatalf("write visible before Release: %d", v)
	}
	if tx2, ok := pgadvisory.Tx(l); !ok || tx2 != tx {
		t.Fatalf("Tx(lease) again: %v %v, want the same Tx", tx2, ok)
	}
	if err := l.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if v := e.value(tab); v != 1 {
		t.Fatalf("after Release v = %d, want 1", v)
	}
	if _, err := tx.Exec(e.ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("Exec after Release = %v, want ErrTxClosed", err)
	}
	if _, ok := pgadvisory.Tx(l); ok {
		t.Fatal("Tx of a released lease = true")
	}
	if _, ok := pgadvisory.Tx(nil); ok {
		t.Fatal("Tx(nil) = true")
	}
}

// TestTxRolledBackWhenLeaseEnded: writes through Tx of a lease that ended
// before Release (MaxHold: the server still holds it) are rolled back, and
// Release reports the loss; so are writes of a lease the server cut.
func TestTxRolledBackWhenLeaseEnded(t *testing.T) {
	e := newEnv(t)
	tab := e.table()
	c := e.client("")
	l, tx := e.leaseTx(c, &fencelock.AcquireOptions{TTL: 30 * time.Second, MaxHold: 200 * time.Millisecond})
	if _, err := tx.Exec(e.ctx, "UPDATE "+tab.Sanitize()+" SET v = 1"); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if _, err := tx.Exec(e.ctx, "UPDATE "+tab.Sanitize()+" SET v = 2"); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Exec after MaxHold = %v, want ErrLeaseLost", err)
	}
	if err := l.Release(e.ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Release after MaxHold = %v, want ErrLeaseLost", err)
	}
	if v := e.value(tab); v != 0 {
		t.Fatalf("writes of an ended lease committed: v = %d", v)
	}

	l, tx = e.leaseTx(c, opts(100*time.Millisecond, false))
	if _, err := tx.Exec(e.ctx, "UPDATE "+tab.Sanitize()+" SET v = 3"); err != nil {
		t.Fatal(err)
	}
	pid, err := holderPID(e.ctx, e.admin, pgadvisory.Key(l.Name()))
	if err != nil || pid == 0 {
		t.Fatalf("pid %d %v", pid, err)
	}
	e.waitFor(5*time.Second, "the server cuts the idle holder", func() (bool, error) {
		var n int
		err := e.admin.QueryRow(e.ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
		return n == 0, err
	})
	if err := l.Release(e.ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Release after the server cut = %v, want ErrLeaseLost", err)
	}
	if v := e.value(tab); v != 0 {
		t.Fatalf("writes of a cut lease committed: v = %d", v)
	}
}

// TestTxSavepoints: Begin opens a savepoint whose Rollback undoes its
// writes (a failed statement included) and keeps the lock.
func TestTxSavepoints(t *testing.T) {
	e := newEnv(t)
	tab := e.table()
	c := e.client("")
	l, tx := e.leaseTx(c, nil)
	upd := "UPDATE " + tab.Sanitize() + " SET v = v + $1"
	boom := errors.New("boom")
	err := pgx.BeginFunc(e.ctx, tx, func(sp pgx.Tx) error {
		if _, err := sp.Exec(e.ctx, upd, 100); err != nil {
			return err
		}
		_, err := sp.Exec(e.ctx, "SELECT 1/0") // fails inside the savepoint
		return errors.Join(boom, err)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("BeginFunc = %v", err)
	}
	err = pgx.BeginFunc(e.ctx, tx, func(sp pgx.Tx) error {
		_, err := sp.Exec(e.ctx, upd, 1)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if l.Err() != nil {
		t.Fatalf("lease ended by a failure inside a savepoint: %v", l.Err())
	}
	var v int
	if err := tx.QueryRow(e.ctx, "SELECT v FROM "+tab.Sanitize()).Scan(&v); err != nil || v != 1 {
		t.Fatalf("inside the lease: v = %d (%v), want 1", v, err)
	}
	if err := l.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if v := e.value(tab); v != 1 {
		t.Fatalf("v = %d, want 1", v)
	}
}

// TestTxFailedStatementLosesLease: a statement that fails outside a
// savepoint aborts the lease's transaction: the lease is lost at once and
// the lock is free.
func TestTxFailedStatementLosesLease(t *testing.T) {
	e := newEnv(t)
	a, b := e.client(""), e.client("")
	l, tx := e.leaseTx(a, opts(30*time.Second, true))
	if _, err := tx.Exec(e.ctx, "SELECT 1/0"); err == nil {
		t.Fatal("division by zero succeeded")
	}
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("lease not ended after its transaction aborted")
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err = %v", l.Err())
	}
	l2, err := b.TryAcquire(e.ctx, l.Name(), nil)
	if err != nil {
		t.Fatalf("lock not freed after the lease's transaction aborted: %v", err)
	}
	_ = l2.Release(e.ctx)
}

// TestTxWithRenewals: statements, rows, batches and copies through Tx run
// while the lease renews every 50 ms on the same connection.
func TestTxWithRenewals(t *testing.T) {
	e := newEnv(t)
	tab := e.table()
	// Renewals interleave with the Tx's statements for 3×TTL; the TTL leaves
	// room for a starved scheduler (150ms lost leases on a loaded machine).
	const ttl = 400 * time.Millisecond
	l, tx := e.leaseTx(e.client(""), opts(ttl, true))
	deadline := time.Now().Add(3 * ttl)
	n := 0
	for time.Now().Before(deadline) {
		n++
		if _, err := tx.Exec(e.ctx, "UPDATE "+tab.Sanitize()+" SET v = v + 1"); err != nil {
			t.Fatalf("Exec %d: %v", n, err)
		}
		rows, err := tx.Query(e.ctx, "SELECT g FROM generate_series(1, 50) g")
		if err != nil {
			t.Fatal(err)
		}
		sum := 0
		for rows.Next() {
			var g int
			if err := rows.Scan(&g); err != nil {
				t.Fatal(err)
			}
			sum += g
		}
		if rows.Err() != nil || sum != 1275 {
			t.Fatalf("rows: %v %d", rows.Err(), sum)
		}
		var b pgx.Batch
		b.Queue("SELECT 1")
		b.Queue("SELECT 2")
		if err := tx.SendBatch(e.ctx, &b).Close(); err != nil {
			t.Fatalf("batch: %v", err)
		}
		rows, err = tx.Query(e.ctx, "SELECT 1")
		if err != nil {
			t.Fatal(err)
		}
		rows.Close() // closed early
		time.Sleep(time.Millisecond)
	}
	if l.Err() != nil {
		t.Fatalf("lease ended during Tx use: %v", l.Err())
	}
	if err := l.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if v := e.value(tab); v != n {
		t.Fatalf("v = %d, want %d", v, n)
	}
}

package pgadvisory_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestAdminExpire: Expire, through another client's Admin, terminates the
// holder's session: the lease reports the loss, the lock is free, and
// Expire of a free lock is a no-op.
func TestAdminExpire(t *testing.T) {
	e := newEnv(t)
	a, b := e.client(""), e.client("")
	n := e.name()
	l, err := a.TryAcquire(e.ctx, n, &fencelock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := testhelp.Admin(t, b).Expire(e.ctx, n); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("lease not reported lost 2s after Expire")
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err after Expire: %v", l.Err())
	}
	l2, err := b.TryAcquire(e.ctx, n, nil)
	if err != nil {
		t.Fatalf("TryAcquire after Expire: %v", err)
	}
	if err := l2.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := testhelp.Admin(t, b).Expire(e.ctx, n); err != nil {
		t.Fatalf("Expire of a free lock: %v", err)
	}
}

// TestAdminKillSessions: KillSessions terminates this client's sessions
// only (held leases, a waiter, idle pool connections); another client's
// lease is untouched; the client works again afterwards.
func TestAdminKillSessions(t *testing.T) {
	e := newEnv(t)
	a, b := e.client("application_name=kill-a"), e.client("application_name=kill-b")
	n := e.name()
	o := &fencelock.AcquireOptions{TTL: 10 * time.Second}
	la, err := a.TryAcquire(e.ctx, n+"-a", o)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(e.ctx, n+"-b", o)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(context.Background())
	waitErr := make(chan error, 1)
	go func() { _, err := a.Acquire(e.ctx, n+"-b", o); waitErr <- err }()
	e.waitFor(5*time.Second, "a's waiter in the server queue", func() (bool, error) {
		w, err := e.waiters(pgadvisory.Key(n + "-b"))
		return w == 1, err
	})
	count := func(app string) int {
		var k int
		if err := e.admin.QueryRow(e.ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	bBefore := count("kill-b")
	if err := testhelp.Admin(t, a).KillSessions(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.waitFor(5*time.Second, "a's sessions to end", func() (bool, error) { return count("kill-a") == 0, nil })
	if got := count("kill-b"); got != bBefore {
		t.Fatalf("client b had %d sessions, has %d after a's KillSessions", bBefore, got)
	}
	select {
	case <-la.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("a's lease not reported lost 2s after KillSessions")
	}
	select {
	case err := <-waitErr:
		if err == nil {
			t.Fatal("a's waiter was granted a lock held by b")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a's waiter still waiting 5s after its session was killed")
	}
	if lb.Err() != nil {
		t.Fatalf("b's lease ended: %v", lb.Err())
	}
	l2, err := a.TryAcquire(e.ctx, n+"-a", o)
	if err != nil {
		t.Fatalf("TryAcquire after KillSessions: %v", err)
	}
	if l2.Fence() <= la.Fence() {
		t.Fatalf("fence %d after KillSessions, not above %d", l2.Fence(), la.Fence())
	}
	_ = l2.Release(e.ctx)
}

// TestWaitersDoNotStarveOtherNames: with a pool of 2 connections, blocked
// Acquires on a busy name keep at most max_wait_conns (1) of them: the
// others poll, and a free, unrelated name is granted at once, by
// TryAcquire and by Acquire.
func TestWaitersDoNotStarveOtherNames(t *testing.T) {
	e := newEnv(t)
	holder := e.client("")
	c := e.client("pool_max_conns=2&max_wait_conns=1&conn_timeout=2s")
	busy := e.name()
	hl, err := holder.TryAcquire(e.ctx, busy, &fencelock.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	granted := make(chan fencelock.Fence, 4)
	for range 4 {
		wg.Go(func() {
			l, err := c.Acquire(wctx, busy, &fencelock.AcquireOptions{TTL: 30 * time.Second})
			if err != nil {
				t.Errorf("waiter: %v", err)
				return
			}
			granted <- l.Fence()
			_ = l.Release(wctx)
		})
	}
	defer func() { cancel(); wg.Wait() }()
	e.waitFor(5*time.Second, "one waiter in the server queue", func() (bool, error) {
		w, err := e.waiters(pgadvisory.Key(busy))
		return w >= 1, err
	})
	time.Sleep(100 * time.Millisecond) // the other three are polling now
	if w, _ := e.waiters(pgadvisory.Key(busy)); w != 1 {
		t.Fatalf("%d waiters of the client in the server queue, want max_wait_conns = 1", w)
	}
	for i := range 5 {
		start := time.Now()
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
		l, err := c.TryAcquire(ctx, e.name(), nil)
		cancel()
		if err != nil {
			t.Fatalf("TryAcquire %d of a free name while 4 acquires wait on another: %v", i, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("TryAcquire %d of a free name took %v", i, took)
		}
		if err := l.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
		l, err = c.Acquire(e.ctx, e.name(), &fencelock.AcquireOptions{Wait: 3 * time.Second})
		if err != nil {
			t.Fatalf("Acquire %d of a free name: %v", i, err)
		}
		_ = l.Release(e.ctx)
	}
	// Freed, the busy name goes to every waiter in turn, the queued one
	// and the polling ones.
	if err := hl.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	prev := hl.Fence()
	for i := range 4 {
		select {
		case f := <-granted:
			if f <= prev {
				t.Fatalf("grant %d: fence %d not above %d", i, f, prev)
			}
			prev = f
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of 4 waiters granted 10s after the name was freed", i)
		}
	}
}

// TestExhaustedPoolIsAnError: when held leases use every connection, a
// TryAcquire of another name fails with ErrUnavailable saying the pool is
// exhausted: within conn_timeout under context.Background(), within the
// ctx when that ends first.
func TestExhaustedPoolIsAnError(t *testing.T) {
	e := newEnv(t)
	c := e.client("pool_max_conns=2&conn_timeout=300ms")
	o := &fencelock.AcquireOptions{TTL: 30 * time.Second}
	for i := range 2 {
		l, err := c.TryAcquire(e.ctx, e.name(), o)
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
		defer l.Release(context.Background())
	}
	start := time.Now()
	_, err := c.TryAcquire(context.Background(), e.name(), o)
	took := time.Since(start)
	if !errors.Is(err, fencelock.ErrUnavailable) || !strings.Contains(err.Error(), "pool") {
		t.Fatalf("TryAcquire on an exhausted pool: %v, want ErrUnavailable explaining the pool", err)
	}
	if took < 250*time.Millisecond || took > 2*time.Second {
		t.Fatalf("TryAcquire on an exhausted pool returned after %v, want about conn_timeout (300ms)", took)
	}
	t.Logf("%v", err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = c.Acquire(ctx, e.name(), o)
	took = time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Acquire with a 100ms ctx on an exhausted pool: %v, want DeadlineExceeded and ErrUnavailable", err)
	}
	if took > time.Second {
		t.Fatalf("Acquire with a 100ms ctx returned after %v", took)
	}
}

// TestLeaseAsTx: Lease.As gives the lease's transaction as a pgx.Tx (the
// one Tx returns); other targets are refused; after Release, nothing.
func TestLeaseAsTx(t *testing.T) {
	e := newEnv(t)
	c := e.client("")
	l, err := c.TryAcquire(e.ctx, e.name(), &fencelock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var tx pgx.Tx
	if !l.As(&tx) || tx == nil {
		t.Fatal("Lease.As(*pgx.Tx) = false")
	}
	var id string
	if err := tx.QueryRow(e.ctx, "SELECT pg_current_xact_id()::text").Scan(&id); err != nil || id == "" {
		t.Fatalf("statement through the Tx from As: %q, %v", id, err)
	}
	if id2 := tx.Conn(); id2 == nil {
		t.Fatal("Tx.Conn() = nil while held")
	}
	if tx2, ok := pgadvisory.Tx(l); !ok || tx2 != tx {
		t.Fatalf("Tx(l) = %v, %v; want the same Tx as As", tx2, ok)
	}
	// With the fence flush on (the default), the fence is the ID of the
	// durable transaction the session committed just before the lease's
	// transaction began, while it held the lock: below the lease's own ID.
	if txid, err := strconv.ParseUint(id, 10, 64); err != nil || l.Fence() >= fencelock.Fence(txid) {
		t.Fatalf("statement ran in transaction %s, the lease's fence is %s: want a fence below it", id, l.Fence())
	}
	if l.As(new(int)) || l.As(nil) {
		t.Fatal("As accepted an unsupported target")
	}
	if err := l.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	var after pgx.Tx
	if l.As(&after) {
		t.Fatal("As gave a Tx after Release")
	}
	// With fence_flush=false the fence is the lease's own transaction ID.
	l, err = e.client("fence_flush=false").TryAcquire(e.ctx, e.name(), &fencelock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(e.ctx)
	tx, _ = pgadvisory.Tx(l)
	if err := tx.QueryRow(e.ctx, "SELECT pg_current_xact_id()::text").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if fence := l.Fence().String(); fence != id {
		t.Fatalf("fence_flush=false: statement ran in transaction %s, the lease's fence is %s", id, fence)
	}
}

// TestConformanceByURL runs the suite as `fencelock conformance --url`
// does: clients from the URL alone, loss hooks from driver.Admin
// (pg_terminate_backend). Nothing may be skipped.
func TestConformanceByURL(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	conformance.RunConformanceTests(t, conformance.URLHarness(pg.URL()))
}

// TestConformanceByURLLabels: with label_app_name=true the backend keeps
// labels (the sessions' application_name), and the Inspect and Election
// checks hold it to that too.
func TestConformanceByURLLabels(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	conformance.RunConformanceTests(t, conformance.URLHarness(pg.URL()+"&label_app_name=true"))
}

package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
	"github.com/fencelock/fencelock/internal/faultrec"
	"github.com/fencelock/fencelock/internal/faulttest"
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// env is a test's view of the shared server.
type env struct {
	t     *testing.T
	ctx   context.Context
	url   string
	admin *pgxpool.Pool
}

func newEnv(t *testing.T) *env {
	pg := testserver.SharedPostgres(t)
	return newEnvURL(t, pg.URL())
}

// proxied returns a proxy to e's server, closed when t ends, and e's URL
// through it.
func (e *env) proxied(t *testing.T) (*testserver.EtcdProxy, string) {
	t.Helper()
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := testserver.NewEtcdProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	return proxy, u.String()
}

func newEnvURL(t *testing.T, url string) *env {
	ctx := t.Context()
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return &env{t: t, ctx: ctx, url: url, admin: admin}
}

// client opens a client by URL with extra query parameters (may be "").
func (e *env) client(params string) *fencelock.Client {
	e.t.Helper()
	u := e.url
	if params != "" {
		u += "&" + params
	}
	c, err := fencelock.Open(e.ctx, u)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *env) name() string { return e.t.Name() + "-" + randHex(4) }

func opts(ttl time.Duration, renew bool) *fencelock.AcquireOptions {
	return &fencelock.AcquireOptions{TTL: ttl, AutoRenew: fencelock.Bool(renew)}
}

// waitFor polls cond (a server-state query) until it holds or d passes.
func (e *env) waitFor(d time.Duration, what string, cond func() (bool, error)) {
	e.t.Helper()
	testhelp.Eventually(e.t, d, func() error {
		ok, err := cond()
		if err != nil {
			e.t.Fatalf("%s: %v", what, err)
		}
		if !ok {
			return errors.New(what)
		}
		return nil
	})
}

// waiters counts sessions queued (not granted) for advisory lock key.
func (e *env) waiters(key int64) (int, error) {
	var n int
	err := e.admin.QueryRow(e.ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND NOT granted`,
		int64(uint64(key)>>32), int64(uint32(key))).Scan(&n)
	return n, err
}

type acquired struct {
	l   *fencelock.Lease
	err error
	at  time.Time
}

func acquireAsync(ctx context.Context, c *fencelock.Client, name string, o *fencelock.AcquireOptions) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := c.Acquire(ctx, name, o)
		ch <- acquired{l, err, time.Now()}
	}()
	return ch
}

// TestTerminatedHolder: pg_terminate_backend on the holder's connection →
// its lease reports lost promptly (the watcher), and the waiter queued in
// the server is granted with a higher fence.
func TestTerminatedHolder(t *testing.T) {
	e := newEnv(t)
	rec := faultrec.Begin(t, faultrec.Result{Backend: "pgadvisory", Scenario: faultrec.HolderCrashed, Case: "session killed"})
	a, b := e.client(""), e.client("")
	name := e.name()
	key := pgadvisory.Key(name)
	l1, err := a.TryAcquire(e.ctx, name, opts(30*time.Second, true))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(e.ctx, b, name, opts(30*time.Second, true))
	e.waitFor(5*time.Second, "waiter queued in the server", func() (bool, error) { n, err := e.waiters(key); return n == 1, err })
	pid, err := holderPID(e.ctx, e.admin, key)
	if err != nil || pid == 0 {
		t.Fatalf("holder pid %d: %v", pid, err)
	}
	killed := time.Now()
	if _, err := e.admin.Exec(e.ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l1.Done():
	case <-time.After(2 * time.Second):
		t.Fatalf("lease not reported lost 2s after pg_terminate_backend")
	}
	lostAfter := time.Since(killed)
	if !errors.Is(l1.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l1.Err())
	}
	rec.Outcome = faultrec.Lost
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.l.Release(e.ctx)
	rec.WaitGranted, rec.WaitFrom = r.at.Sub(killed), "pg_terminate_backend"
	rec.Fence = faultrec.FenceOf(l1.Fence(), r.l.Fence())
	rec.Note = fmt.Sprintf("the holder's server session killed (pg_terminate_backend), TTL 30s: the lease reported lost %v after, the waiter queued in the server granted at once", lostAfter.Round(time.Millisecond))
	if r.l.Fence() <= l1.Fence() {
		t.Fatalf("waiter's fence %d not above the killed holder's %d", r.l.Fence(), l1.Fence())
	}
	if err := l1.Release(e.ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Release of the killed lease = %v, want ErrLeaseLost", err)
	}
	if r.l.Err() != nil {
		t.Fatalf("new holder's lease ended: %v", r.l.Err())
	}
	t.Logf("lease reported lost %v after pg_terminate_backend; waiter granted %v after it, fence %d → %d",
		lostAfter.Round(time.Millisecond), r.at.Sub(killed).Round(time.Millisecond), l1.Fence(), r.l.Fence())
}

// TestServerCutsIdleHolder: a holder that goes idle past its TTL (auto-renew
// off, never releases) is cut off by the server's idle timeout, not by the
// client: its session disappears no earlier than the TTL, and another client
// takes the lock with a higher fence.
func TestServerCutsIdleHolder(t *testing.T) {
	e := newEnv(t)
	a, b := e.client(""), e.client("")
	name := e.name()
	key := pgadvisory.Key(name)
	const ttl = time.Second
	start := time.Now()
	l1, err := a.TryAcquire(e.ctx, name, opts(ttl, false))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := holderPID(e.ctx, e.admin, key)
	if err != nil || pid == 0 {
		t.Fatalf("holder pid %d: %v", pid, err)
	}
	e.waitFor(5*time.Second, "the server ends the idle holder's session", func() (bool, error) {
		var n int
		err := e.admin.QueryRow(e.ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
		return n == 0, err
	})
	cut := time.Since(start)
	if cut < ttl {
		t.Fatalf("session ended %v after the grant, before the TTL %v", cut, ttl)
	}
	l2, err := b.TryAcquire(e.ctx, name, opts(30*time.Second, true))
	if err != nil {
		t.Fatalf("TryAcquire after the server cut the idle holder: %v", err)
	}
	defer l2.Release(e.ctx)
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("fence %d not above %d", l2.Fence(), l1.Fence())
	}
	select {
	case <-l1.Done():
	case <-time.After(2 * time.Second):
		t.Fatalf("idle holder's lease not ended")
	}
	if !errors.Is(l1.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l1.Err())
	}
	if err := l1.Release(e.ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Release = %v, want ErrLeaseLost", err)
	}
	t.Logf("server cut the idle session %v after the grant (TTL %v)", cut.Round(time.Millisecond), ttl)
}

// TestFenceSurvivesServerCrash: fences keep increasing across SIGKILL of
// the whole server (crash recovery) and a clean restart. With fence_flush
// off, a clean restart keeps them increasing too (the shutdown checkpoint
// records the next transaction ID), but a crash can hand out a fence again;
// the test reports how often it did.
func TestFenceSurvivesServerCrash(t *testing.T) {
	pg := testserver.StartPostgresProcess(t)
	e := newEnvURL(t, pg.URL())
	name := e.name()
	for _, flush := range []bool{true, false} {
		params := ""
		if !flush {
			params = "fence_flush=false"
		}
		repeated := 0
		for round := range 4 { // rounds 0-2: crash; round 3: clean restart
			c := e.client(params)
			l1, err := c.TryAcquire(e.ctx, name, opts(30*time.Second, true))
			if err != nil {
				t.Fatal(err)
			}
			if round == 3 {
				err = pg.Restart(e.ctx)
			} else if err = pg.Kill(); err == nil {
				err = pg.Start(e.ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-l1.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("lease not lost after the server went down")
			}
			c2 := e.client(params)
			l2, err := c2.TryAcquire(e.ctx, name, opts(30*time.Second, true))
			if err != nil {
				t.Fatalf("TryAcquire after restart: %v", err)
			}
			if l2.Fence() <= l1.Fence() {
				if flush || round == 3 {
					t.Fatalf("round %d (fence_flush=%v): fence %d after the server restarted, not above %d", round, flush, l2.Fence(), l1.Fence())
				}
				repeated++
			}
			if err := l2.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
			_ = c.Close()
			_ = c2.Close()
		}
		if !flush {
			t.Logf("fence_flush=false: %d of 3 crashes handed out a fence that was not higher", repeated)
		}
		r := faultrec.Result{Backend: "pgadvisory", Scenario: faultrec.ServerRestarted, Case: fmt.Sprintf("fence_flush=%v", flush), Outcome: faultrec.Lost, Fence: faultrec.FenceIncreased}
		r.Note = fmt.Sprintf("fence_flush=%v: server killed (SIGKILL) 3 times and restarted cleanly once, a lease held each time: every lease reported lost; %d of 3 crashes handed out a fence that was not higher", flush, repeated)
		if repeated > 0 {
			r.Fence = faultrec.FenceRepeated
		}
		faultrec.Record(t, r)
	}
}

// TestFenceSurvivesServerCrashAfterWait: a grant handed out by a waiter in
// the server's queue (blocking Acquire, whose query flushes the fence
// itself) is durable too: the server is killed (SIGKILL) right after the
// waiter's grant returns, and the next fence is higher.
func TestFenceSurvivesServerCrashAfterWait(t *testing.T) {
	pg := testserver.StartPostgresProcess(t)
	name := newEnvURL(t, pg.URL()).name()
	for round := range 2 {
		e := newEnvURL(t, pg.URL()) // a fresh admin pool: the crash broke the last one's connections
		a, b := e.client(""), e.client("")
		l1, err := a.TryAcquire(e.ctx, name, opts(30*time.Second, false))
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(e.ctx, b, name, opts(30*time.Second, false))
		e.waitFor(5*time.Second, "waiter queued", func() (bool, error) { n, err := e.waiters(pgadvisory.Key(name)); return n == 1, err })
		if err := l1.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.l.Fence() <= l1.Fence() {
			t.Fatalf("round %d: waiter's fence %d, not above the holder's %d", round, r.l.Fence(), l1.Fence())
		}
		if err := pg.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := pg.Start(e.ctx); err != nil {
			t.Fatal(err)
		}
		c := e.client("")
		l2, err := c.TryAcquire(e.ctx, name, opts(30*time.Second, false))
		if err != nil {
			t.Fatalf("TryAcquire after the crash: %v", err)
		}
		if l2.Fence() <= r.l.Fence() {
			t.Fatalf("round %d: fence %d after the crash, not above the waiter's %d", round, l2.Fence(), r.l.Fence())
		}
		if err := l2.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
		_ = a.Close()
		_ = b.Close()
		_ = c.Close()
	}
}

// TestLongWaitStartsTTLAtGrant: a waiter granted after waiting longer than
// its TTL gets a validity deadline counted from after the grant, not from
// when it started waiting, and keeps the lease.
func TestLongWaitStartsTTLAtGrant(t *testing.T) {
	e := newEnv(t)
	a, b := e.client(""), e.client("")
	name := e.name()
	const ttl = 200 * time.Millisecond
	l1, err := a.TryAcquire(e.ctx, name, opts(30*time.Second, true))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(e.ctx, b, name, opts(ttl, true))
	e.waitFor(5*time.Second, "waiter queued", func() (bool, error) { n, err := e.waiters(pgadvisory.Key(name)); return n == 1, err })
	time.Sleep(3 * ttl) // the wait under test outlasts the TTL
	if err := l1.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Release(e.ctx)
	if left := r.l.ValidUntil().Sub(r.at); left < ttl/2 {
		t.Fatalf("granted after a long wait with only %v of validity left (TTL %v)", left, ttl)
	}
	time.Sleep(2 * ttl) // and renewal keeps it
	if r.l.Err() != nil {
		t.Fatalf("lease ended after the long wait: %v", r.l.Err())
	}
}

// TestCancelledWaitLeavesQueue: a cancelled Acquire leaves the server's
// lock queue at once (the cancel request), not when the lock frees.
func TestCancelledWaitLeavesQueue(t *testing.T) {
	e := newEnv(t)
	a, b := e.client(""), e.client("")
	name := e.name()
	key := pgadvisory.Key(name)
	l1, err := a.TryAcquire(e.ctx, name, opts(30*time.Second, true))
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Release(e.ctx)
	ctx, cancel := context.WithCancel(e.ctx)
	got := acquireAsync(ctx, b, name, nil)
	e.waitFor(5*time.Second, "waiter queued", func() (bool, error) { n, err := e.waiters(key); return n == 1, err })
	cancel()
	r := <-got
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v, want context.Canceled", r.err)
	}
	e.waitFor(time.Second, "cancelled waiter gone from the server queue", func() (bool, error) { n, err := e.waiters(key); return n == 0, err })
}

// TestTimeoutsDoNotCutTheWait: statement_timeout and lock_timeout (here
// from the URL) do not end a blocking Acquire, and are restored for the
// statements run in the lease's transaction, with the fence flush on and
// off (each lifts and restores them its own way).
func TestTimeoutsDoNotCutTheWait(t *testing.T) {
	for _, mode := range []string{"", "&fence_flush=false"} {
		t.Run("params="+mode, func(t *testing.T) { timeoutsDoNotCutTheWait(t, mode) })
	}
}

func timeoutsDoNotCutTheWait(t *testing.T, mode string) {
	e := newEnv(t)
	a, b := e.client(mode[min(1, len(mode)):]), e.client("statement_timeout=50ms&lock_timeout=40ms"+mode)
	name := e.name()
	l1, err := a.TryAcquire(e.ctx, name, opts(30*time.Second, true))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(e.ctx, b, name, opts(30*time.Second, true))
	e.waitFor(5*time.Second, "waiter queued", func() (bool, error) { n, err := e.waiters(pgadvisory.Key(name)); return n == 1, err })
	time.Sleep(150 * time.Millisecond) // longer than both timeouts
	if err := l1.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("Acquire with statement_timeout=50ms waiting 150ms: %v", r.err)
	}
	defer r.l.Release(e.ctx)
	tx, ok := pgadvisory.Tx(r.l)
	if !ok {
		t.Fatal("Tx: false")
	}
	var st, lt string
	if err := tx.QueryRow(e.ctx, "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')").Scan(&st, &lt); err != nil {
		t.Fatal(err)
	}
	if st != "50ms" || lt != "40ms" {
		t.Fatalf("in the lease's transaction statement_timeout=%s lock_timeout=%s, want the session's 50ms, 40ms", st, lt)
	}
}

// TestExhaustedPool: with every pool connection held by leases, TryAcquire
// honours its ctx, and grants need no pool connection for the fence flush.
func TestExhaustedPool(t *testing.T) {
	e := newEnv(t)
	c := e.client("pool_max_conns=1")
	l1, err := c.TryAcquire(e.ctx, e.name(), opts(30*time.Second, true))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.TryAcquire(ctx, e.name(), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire with the pool exhausted = %v, want DeadlineExceeded", err)
	}
	if err := l1.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := c.TryAcquire(e.ctx, e.name(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = l2.Release(e.ctx)
}

// TestInteropRawAdvisoryLock: a session that locks Key(name) itself (as a
// Python worker would) and a fencelock lease of name exclude each other.
func TestInteropRawAdvisoryLock(t *testing.T) {
	e := newEnv(t)
	c := e.client("")
	name := "interop/ü-" + randHex(4)
	raw, err := pgx.Connect(e.ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(e.ctx)
	tx, err := raw.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got bool
	if err := tx.QueryRow(e.ctx, "SELECT pg_try_advisory_xact_lock($1)", pgadvisory.Key(name)).Scan(&got); err != nil || !got {
		t.Fatalf("raw lock: %v %v", got, err)
	}
	if _, err := c.TryAcquire(e.ctx, name, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while a raw session holds Key(name) = %v, want ErrNotAcquired", err)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(e.ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(e.ctx)
	if err := raw.QueryRow(e.ctx, "SELECT pg_try_advisory_lock($1)", pgadvisory.Key(name)).Scan(&got); err != nil || got {
		t.Fatalf("raw session took Key(name) while fencelock holds it: %v %v", got, err)
	}
}

// TestCancelEarly: an Acquire cancelled right as it starts (its cancel
// request may reach the server before its query) still returns promptly
// and leaves nothing held or queued.
func TestCancelEarly(t *testing.T) {
	e := newEnv(t)
	a, b := e.client(""), e.client("")
	name := e.name()
	key := pgadvisory.Key(name)
	l1, err := a.TryAcquire(e.ctx, name, opts(30*time.Second, true))
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Release(e.ctx)
	for i := range 20 {
		ctx, cancel := context.WithCancel(e.ctx)
		time.AfterFunc(time.Duration(i%4)*200*time.Microsecond, cancel)
		start := time.Now()
		_, err := b.Acquire(ctx, name, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: %v", i, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("round %d: cancelled Acquire took %v", i, d)
		}
	}
	e.waitFor(time.Second, "no waiter left in the queue", func() (bool, error) { n, err := e.waiters(key); return n == 0, err })
}

// TestFaultClientPartitioned: the holder's client cut off from the server
// (a paused proxy: connections stay open, no byte moves) while another
// client waits in the server's queue. The holder's renewals cannot arrive:
// its lease ends at its ValidUntil; the server, seeing the holder's
// transaction idle past the TTL, ends its session, which frees the lock,
// and the waiter is granted after the holder's lease ended, with a higher
// fence; the stale holder's fenced write is rejected; after the heal its
// Release is ErrLeaseLost.
func TestFaultClientPartitioned(t *testing.T) {
	e := newEnv(t)
	proxy, proxied := e.proxied(t)
	name := e.name()
	const ttl = time.Second
	faulttest.ClientPartitioned(t, faulttest.Partition{
		Backend: "pgadvisory",
		Cut:     newEnvURL(t, proxied).client(""),
		Other:   e.client(""),
		Pause:   proxy.Pause, Resume: proxy.Resume,
		Name: name, TTL: ttl,
		Hold: opts(ttl, true), Wait: opts(30*time.Second, true),
		Queued: func() {
			e.waitFor(5*time.Second, "waiter queued in the server", func() (bool, error) { n, err := e.waiters(pgadvisory.Key(name)); return n == 1, err })
		},
		LostWithin: ttl + time.Second, GrantWithin: 5 * ttl,
		Story: "holder behind a paused proxy, TTL %v: its lease ended locally %v after the cut; the server ended the idle holder's session and the queued waiter was granted %v after the cut; the stale holder's fenced write was rejected",
	})
}

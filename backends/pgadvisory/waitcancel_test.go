package pgadvisory_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
)

// TestCancelledWaitBehindFrozenLink: a blocking Acquire whose ctx ends
// while its link to the server is frozen (a paused proxy: its cancel
// requests go nowhere either) returns ctx's error once the cancel grace
// (2 s) is over, by breaking its connection, instead of waiting for the
// frozen link; the server then drops the waiter from its queue.
func TestCancelledWaitBehindFrozenLink(t *testing.T) {
	e := newEnv(t)
	proxy, proxied := e.proxied(t)
	for _, mode := range []string{"", "fence_flush=false"} {
		holder, waiter := e.client(mode), newEnvURL(t, proxied).client(mode)
		name := e.name()
		key := pgadvisory.Key(name)
		l, err := holder.TryAcquire(e.ctx, name, opts(30*time.Second, false))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(e.ctx)
		got := acquireAsync(ctx, waiter, name, opts(30*time.Second, false))
		e.waitFor(5*time.Second, "waiter queued", func() (bool, error) { n, err := e.waiters(key); return n == 1, err })
		proxy.Pause()
		cancel()
		start := time.Now()
		var r acquired
		select {
		case r = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("%q: cancelled Acquire behind a frozen link still blocked after 10s", mode)
		}
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("%q: cancelled Acquire = %v, want context.Canceled", mode, r.err)
		}
		proxy.Resume()
		e.waitFor(5*time.Second, "the broken waiter gone from the queue", func() (bool, error) { n, err := e.waiters(key); return n == 0, err })
		t.Logf("%q: returned %v after the cancel", mode, time.Since(start).Round(time.Millisecond))
		if err := l.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCancelledTryBehindFrozenLink: a TryAcquire (and an Extend) whose ctx
// ends while its link to the server is frozen gets the cleanup grace (2 s)
// to hear back, then breaks its connection and returns, instead of
// waiting for the frozen link: the TryAcquire with ctx's error and
// ErrIndeterminate (the grant is unknown), the Extend with ErrLeaseLost
// (the lease's connection is gone).
func TestCancelledTryBehindFrozenLink(t *testing.T) {
	e := newEnv(t)
	proxy, proxied := e.proxied(t)
	c := newEnvURL(t, proxied).client("fence_flush=false")
	l, err := c.TryAcquire(e.ctx, e.name(), opts(30*time.Second, false))
	if err != nil {
		t.Fatal(err)
	}
	// A second connection, idle in the pool, for the TryAcquire below.
	l2, err := c.TryAcquire(e.ctx, e.name(), opts(30*time.Second, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Pause()
	defer proxy.Resume()
	for _, op := range []struct {
		name string
		do   func(context.Context) error
		want []error
	}{
		{"TryAcquire", func(ctx context.Context) error {
			_, err := c.TryAcquire(ctx, e.name(), opts(30*time.Second, false))
			return err
		},
			[]error{context.DeadlineExceeded, fencelock.ErrIndeterminate}},
		{"Extend", func(ctx context.Context) error { return l.Extend(ctx, 30*time.Second) }, []error{fencelock.ErrLeaseLost}},
	} {
		ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- op.do(ctx) }()
		select {
		case err := <-done:
			for _, w := range op.want {
				if !errors.Is(err, w) {
					t.Errorf("%s behind a frozen link = %v, want an error matching %v", op.name, err, w)
				}
			}
			if d := time.Since(start); d < time.Second {
				t.Errorf("%s returned after %v, before the cleanup grace", op.name, d)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s behind a frozen link still blocked after 10s", op.name)
		}
		cancel()
		t.Logf("%s returned %v after the call", op.name, time.Since(start).Round(time.Millisecond))
	}
}

// TestCancelledWaitKeepsConnection: with the fence flush off, an Acquire
// cancelled while it waits returns ctx's error, leaves the server's queue
// and leaves its connection in the pool: the pool's next user gets the
// same server session. And no cancel request sent for a wait reaches a
// later user of its connection: here the request is held back in its dial
// until after the wait was granted (the grant is freed), and the next
// statement on the pool, running across the time it would land, is not
// cancelled.
func TestCancelledWaitKeepsConnection(t *testing.T) {
	e := newEnv(t)
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	var slow atomic.Bool
	dialing := make(chan struct{}, 1)
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if slow.Load() { // cancel requests (and a new connection)
			select {
			case dialing <- struct{}{}:
			default:
			}
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return d.DialContext(ctx, network, addr)
	}
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waiter, err := pgadvisory.New(pool, &pgadvisory.Config{NoFenceFlush: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	holder := e.client("fence_flush=false")
	pid := func(sql string) int32 {
		var p int32
		start := time.Now()
		if err := pool.QueryRow(e.ctx, sql).Scan(&p); err != nil {
			t.Fatalf("the pool's next statement, %v after the cancelled Acquire returned: %v", time.Since(start).Round(time.Millisecond), err)
		}
		return p
	}
	for _, late := range []bool{false, true} {
		name := e.name()
		pid0 := pid("SELECT pg_backend_pid()")
		l, err := holder.TryAcquire(e.ctx, name, opts(30*time.Second, false))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(e.ctx)
		got := acquireAsync(ctx, waiter, name, opts(30*time.Second, false))
		e.waitFor(5*time.Second, "waiter queued", func() (bool, error) { n, err := e.waiters(pgadvisory.Key(name)); return n == 1, err })
		slow.Store(late)
		cancel()
		if late {
			<-dialing // the cancel request is on its way: grant the wait first
			if err := l.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
		}
		if r := <-got; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("late=%v: cancelled Acquire = %v, want context.Canceled", late, r.err)
		}
		if !late {
			e.waitFor(time.Second, "cancelled waiter gone from the server queue", func() (bool, error) { n, err := e.waiters(pgadvisory.Key(name)); return n == 0, err })
			if pid1 := pid("SELECT pg_backend_pid()"); pid1 != pid0 {
				t.Errorf("the cancelled wait's connection was closed: the pool's next statement ran on session %d, not %d", pid1, pid0)
			}
			_ = l.Release(e.ctx)
			continue
		}
		_ = pid("SELECT pg_backend_pid() FROM pg_sleep(0.5)")
		slow.Store(false)
		if l, err := holder.TryAcquire(e.ctx, name, opts(30*time.Second, false)); err != nil {
			t.Errorf("after the cancelled Acquire, TryAcquire = %v: the grant it got was not freed", err)
		} else {
			_ = l.Release(e.ctx)
		}
	}
}

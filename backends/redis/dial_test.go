package redis

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/internal/testserver"
)

// TestFreshConnPeeksOnlyWhenIdle: the RawConn go-redis's health check
// reads through calls its function (the peek) only once the connection
// was idle for its window.
func TestFreshConnPeeksOnlyWhenIdle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	wc, err := wrapFresh(c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	fc := wc.(*freshConn)
	peeked := func() bool {
		raw, err := fc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		called := false
		_ = raw.Read(func(uintptr) bool { called = true; return true })
		return called
	}
	if peeked() {
		t.Fatal("a connection just dialed was peeked")
	}
	fc.used.Store(time.Now().Add(-2 * time.Hour).UnixNano())
	if !peeked() {
		t.Fatal("a connection idle past its window was not peeked")
	}
	if _, err := wc.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if peeked() {
		t.Fatal("a connection just written was peeked")
	}
}

// TestFreshDialerFindsServerClose: a pooled connection the server closed
// is dropped before use once idle past the window (the peek); within it,
// it is found on use: the command fails on it (seen with go-redis's
// retries off) and with them on is retried on a new connection.
func TestFreshDialerFindsServerClose(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := t.Context()
	admin := goredis.NewClient(&goredis.Options{Addr: r.Addr(), Protocol: 2})
	defer admin.Close()
	for _, tc := range []struct {
		window  time.Duration
		retries int
		fails   bool
	}{{0, -1, false}, {time.Hour, -1, true}, {time.Hour, 0, false}} {
		rc := goredis.NewClient(&goredis.Options{Addr: r.Addr(), Protocol: 2, PoolSize: 1, MaxRetries: tc.retries,
			Dialer: freshDialer(&goredis.UniversalOptions{}, tc.window)})
		if err := rc.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		waitClosed(ctx, t, admin)
		if err := rc.Ping(ctx).Err(); (err != nil) != tc.fails {
			t.Errorf("window %v, retries %d: ping after the server closed the connection: %v, want failure %v", tc.window, tc.retries, err, tc.fails)
		}
		_ = rc.Close()
	}
}

// waitClosed waits until the server lists admin's connection alone.
func waitClosed(ctx context.Context, t *testing.T, admin *goredis.Client) {
	for {
		list, err := admin.Do(ctx, "client", "list", "type", "normal").Text()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(strings.TrimSpace(list), "\n") == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

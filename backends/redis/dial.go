package redis

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Pool health checks (internals).
//
// Before it hands out a pooled connection, go-redis checks it for a
// server-side close or unexpected data with a non-blocking MSG_PEEK recv
// (on Linux and the BSDs): one system call per command, about 6 % of a
// contended grant's client CPU (two commands per grant; measured with
// BenchmarkContended8Clients). A connection that was read or written
// within the last freshFor cannot usefully have gone stale in between
// (a server that closes idle connections waits far longer), so a client
// opened from a URL, with RESP2 (the default: see URLOpener), dials
// connections that answer that check at once while fresh, and with the
// real peek once idle for longer. A connection the server closed within
// that window is found when a command on it reads EOF: go-redis drops it
// and retries the command on another connection (MaxRetries), as it does
// for TLS connections, which it never peeks.
//
// With RESP3 the peek also finds push notifications waiting in the
// socket, so a protocol=3 client keeps go-redis's dialer; so does one
// whose Configure sets a Dialer.

// freshFor is how long after its last read or write a connection skips
// go-redis's peek.
const freshFor = time.Second

// freshDialer returns uo's dialer (go-redis's default one, for uo's dial
// timeout and TLS config) with its plain connections wrapped in freshConn,
// fresh for window after each read or write.
func freshDialer(uo *goredis.UniversalOptions, window time.Duration) func(context.Context, string, string) (net.Conn, error) {
	timeout := uo.DialTimeout
	if timeout == 0 {
		timeout = 5 * time.Second // go-redis's default
	}
	dial := goredis.NewDialer(&goredis.Options{DialTimeout: timeout, TLSConfig: uo.TLSConfig})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrapFresh(c, window)
	}
}

// wrapFresh wraps c if it exposes its file descriptor (TCP, Unix; a TLS
// connection does not, and go-redis does not peek it).
func wrapFresh(c net.Conn, window time.Duration) (net.Conn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	f := &freshConn{Conn: c, raw: raw, window: int64(window)}
	f.touch()
	return f, nil
}

// freshConn is a connection that remembers when it was last read or
// written: go-redis's health check (via SyscallConn) peeks it only when
// that was longer than window (ns) ago.
type freshConn struct {
	net.Conn
	raw    syscall.RawConn
	window int64
	used   atomic.Int64 // UnixNano of the last Read or Write's return
}

func (c *freshConn) touch() { c.used.Store(time.Now().UnixNano()) }

func (c *freshConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.touch()
	return n, err
}

func (c *freshConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.touch()
	return n, err
}

// SyscallConn returns the connection's RawConn, whose Read skips its
// function (nothing read: healthy) while the connection is fresh.
func (c *freshConn) SyscallConn() (syscall.RawConn, error) {
	if time.Now().UnixNano()-c.used.Load() < c.window {
		return freshRaw{c.raw}, nil
	}
	return c.raw, nil
}

// freshRaw is the RawConn of a fresh connection: Read does not call f (no
// peek); Control and Write are the connection's own.
type freshRaw struct{ syscall.RawConn }

func (freshRaw) Read(func(fd uintptr) bool) error { return nil }

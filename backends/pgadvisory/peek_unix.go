//go:build unix

package pgadvisory

import (
	"errors"
	"net"
	"syscall"
)

// peek looks at c's socket without reading from it or blocking: whether
// bytes are waiting, the peer closed it, or nothing is there.
func peek(c net.Conn) peekState {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS
		c = u.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peekNone
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peekClosed
	}
	st := peekNone
	var buf [1]byte
	// Control, not Read: Read takes the descriptor's read lock, which a
	// goroutine of pgconn blocked in a read holds (its background reader,
	// started when a write is slow), so Read would wait for that read to
	// return — seconds, while the lease's renewal waits for this check.
	// MSG_PEEK|MSG_DONTWAIT neither consumes nor blocks.
	err = rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0:
			st = peekData
		case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EINTR):
			st = peekNone
		default: // n == 0: EOF; or ECONNRESET and the like
			st = peekClosed
		}
	})
	if err != nil {
		return peekClosed // the descriptor is closed
	}
	return st
}

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
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0:
			st = peekData
		case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EINTR):
			st = peekNone
		default: // n == 0: EOF; or ECONNRESET and the like
			st = peekClosed
		}
		return true // never wait for readability
	})
	if err != nil {
		return peekClosed // the descriptor is closed
	}
	return st
}

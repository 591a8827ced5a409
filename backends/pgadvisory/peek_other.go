//go:build !unix

package pgadvisory

import "net"

// peek cannot look at a socket without reading on this platform; dead
// connections are found by renewals and Release instead.
func peek(net.Conn) peekState { return peekNone }

// Package wire holds the net/rpc message types of memrpc:// (net/rpc needs
// exported types).
package wire

import (
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Result codes, so sentinel errors survive the wire.
const (
	OK = iota
	NotAcquired
	LeaseLost
)

// Args is every call's argument.
type Args struct {
	Name, Token, Label string
	TTL                time.Duration
}

// Reply is every call's result.
type Reply struct {
	Code      int
	Fence     driver.Fence
	Held      bool          // Inspect
	Label     string        // Inspect
	Remaining time.Duration // Inspect
}

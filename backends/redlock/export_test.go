package redlock

import (
	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/adminhook"
)

// Test hooks for the external test package.

// FenceKey and VoidKey are the companion keys of the lock key lock.
func FenceKey(lock string) string { return keysFor(lock).fence }

func VoidKey(lock, token string) string { return keysFor(lock).void(token) }

// Idle waits until the client's calls still in flight in the background
// (the tail of decided fan-outs, abandons of frozen primaries) have ended.
func Idle(c *fencelock.Client) {
	a, ok := adminhook.Of(c)
	if !ok {
		panic("not a redlock client")
	}
	a.(*backend).bg.Wait()
}

// QueueKey is the lead primary's queue of blocked Acquires on lock.
func QueueKey(lock string) string { return keysFor(lock).queue }

// QueueDeadlinesKey is the hash of the queued Acquires' deadlines on the
// lead primary.
func QueueDeadlinesKey(lock string) string { return keysFor(lock).queueDL }

// LabelKey is the key holding the label of the lease granted to token.
func LabelKey(lock, token string) string { return keysFor(lock).label(token) }

package redlock

import (
	"context"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
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

// ReleaseChannel is the channel every primary publishes lock's release
// notices on; OwnChannel is the lead's channel for the notices naming a
// waiter of the Client whose waiter ids start with client and a dot.
func ReleaseChannel(lock string) string { return keysFor(lock).channel }

func OwnChannel(lock, client string) string { return keysFor(lock).own(client) }

// TryNamed makes one named attempt (see attemptMode) on c for name, as
// the blocked Acquire with waiter id waiter, and releases what it got.
func TryNamed(ctx context.Context, c *fencelock.Client, name, waiter string, ttl time.Duration) error {
	a, ok := adminhook.Of(c)
	if !ok {
		panic("not a redlock client")
	}
	b := a.(*backend)
	l, _, err := b.try(ctx, driver.AcquireRequest{Name: name, Token: driver.NewToken(), TTL: ttl}, waiter, named, "")
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

// Package guard is the resource side of fencing: helpers that make a
// resource refuse writes carrying a stale fence.
//
// A lock alone cannot protect data: a holder that stalls past its TTL (GC,
// a frozen VM, a slow network call) keeps working while another holder has
// the lock, and its late write erases the other's work. The fence fixes it,
// but only if the resource checks it. Two modes:
//
//   - Claim-first (safe): before reading, stamp the fence on the record if
//     it is greater than the stored one (Claim); then write only while the
//     stored fence is still yours (WriteClaimed). A newer holder's claim makes
//     the stale holder's write fail, so no update is lost.
//   - Write-only (weaker): write only if the fence is at least the stored one
//     (WriteIfNotOlder). It refuses writes older than the last write, but a
//     stale holder that writes between a newer holder's read and write is
//     accepted, and that newer write then erases it.
//
// Every refusal is an error wrapping ErrStale, never a silent no-op.
//
// Fences are driver.Fence, the type fencelock.Fence names (an alias):
// pass a lease's Fence() as it is, e.g. counter.Claim(ctx, lease.Fence()).
// guard imports package driver for that type alone, not the client, so a
// resource's service can use it without the lock client's dependencies.
package guard

import (
	"context"
	"errors"

	"github.com/fencelock/fencelock/driver"
)

// ErrStale: the write carried a fence older than the resource has seen.
// The lease that issued it is no longer the newest: stop, re-acquire, retry.
var ErrStale = errors.New("guard: stale fence: a newer lease holder has written or claimed this resource")

// Resource is a guarded integer resource (a counter row, a document field):
// the shape the lost-update experiment drives, implemented in memory
// (Counter) and on real stores (see PGCounter).
type Resource interface {
	// Read returns the value, unchecked (unfenced mode).
	Read(ctx context.Context) (int64, error)
	// Write sets the value, unchecked (unfenced mode).
	Write(ctx context.Context, v int64) error
	// Claim stamps fence if it is greater than the stored fence and returns
	// the value; ErrStale otherwise.
	Claim(ctx context.Context, fence driver.Fence) (int64, error)
	// WriteClaimed writes only while the stored fence equals fence; ErrStale
	// otherwise.
	WriteClaimed(ctx context.Context, fence driver.Fence, v int64) error
	// WriteIfNotOlder writes and stamps fence if fence is at least the stored
	// fence; ErrStale otherwise.
	WriteIfNotOlder(ctx context.Context, fence driver.Fence, v int64) error
}

package fencelock

import (
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/driver"
)

// The errors every backend maps to. Test them with errors.Is; every error
// fencelock returns is one of these (or a ctx error) wrapped in one *Error.
var (
	// ErrNotAcquired: the lock is held by another owner (TryAcquire), or
	// still was when AcquireOptions.Wait ran out (Acquire).
	ErrNotAcquired = driver.ErrNotAcquired
	// ErrLeaseLost: the lease ended without Release: it expired, the store
	// dropped it, renewals failed until its validity deadline, or MaxHold
	// passed. Release and Extend of such a lease return it; they never touch
	// another holder's lock.
	ErrLeaseLost = driver.ErrLeaseLost
	// ErrReleased: Lease.Err after a successful Release; Extend after Release.
	ErrReleased = driver.ErrReleased
	// ErrClosed: the Client was closed.
	ErrClosed = driver.ErrClosed
	// ErrUnavailable: the store could not be reached or did not answer.
	ErrUnavailable = driver.ErrUnavailable
	// ErrIndeterminate: the outcome is unknown; the store may have applied it.
	ErrIndeterminate = driver.ErrIndeterminate
	// ErrInvalid: bad input (lock name, TTL, duration, URL or option).
	ErrInvalid = driver.ErrInvalid
)

// Error is the error type fencelock returns. Err, its cause, is a sentinel
// above, a ctx error, or a backend error wrapping a sentinel; two causes
// where two hold, each found by errors.Is: a ctx that ended during a
// store call gives the ctx error and the store's error, and a lease ended
// by Client.Close gives ErrLeaseLost and ErrClosed.
type Error struct {
	Op      string // "acquire", "try-acquire", "extend", "release", "renew", "open", ...
	Backend string // the backend's short name, if known
	Name    string // the lock name, if any
	Err     error  // the cause
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("fencelock: ")
	b.WriteString(e.Op)
	if e.Backend != "" {
		b.WriteString(" (")
		b.WriteString(e.Backend)
		b.WriteString(")")
	}
	if e.Name != "" {
		b.WriteString(" ")
		b.WriteString(quoteName(e.Name))
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// quoteName quotes a lock name for a message as a Go string literal, so
// that a name with a NUL byte, control characters or invalid UTF-8 (which
// validation refuses) still makes a printable, one-line message, and
// shortens very long names.
func quoteName(n string) string {
	const max = 64
	if len(n) > max {
		q := strconv.Quote(n[:max])
		return q[:len(q)-1] + `..."`
	}
	return strconv.Quote(n)
}

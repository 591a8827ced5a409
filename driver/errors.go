package driver

import "errors"

// The error sentinels, shared by drivers and the portable package (which
// re-exports them). Drivers wrap them with detail; callers test them with
// errors.Is.
var (
	// ErrNotAcquired: the lock is held by someone else.
	ErrNotAcquired = errors.New("lock is held by another owner")
	// ErrLeaseLost: the lease is no longer held (expired, taken over, or the
	// store dropped it).
	ErrLeaseLost = errors.New("lease lost")
	// ErrReleased: the lease was released by its holder.
	ErrReleased = errors.New("lease released")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("client closed")
	// ErrUnavailable: the store could not be reached or did not answer.
	ErrUnavailable = errors.New("lock store unavailable")
	// ErrIndeterminate: the outcome is unknown; the store may have applied it.
	ErrIndeterminate = errors.New("outcome indeterminate")
	// ErrInvalid: bad input (name, TTL, URL, option).
	ErrInvalid = errors.New("invalid argument")
)

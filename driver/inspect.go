package driver

import (
	"context"
	"time"
)

// LockInfo is what a store reports of one lock, as the store sees it now.
type LockInfo struct {
	// Held reports whether the lock is held.
	Held bool
	// Label is the holder's label (AcquireRequest.Label), "" when free or
	// when the store does not keep labels (InspectCaps.Label).
	Label string
	// Fence is the holder's fence, 0 when free or when the store cannot
	// tell (InspectCaps.Fence).
	Fence Fence
	// Remaining is how long the store keeps the lock without a renewal,
	// from the moment it answered; 0 when free or when the store cannot
	// tell (InspectCaps.Remaining).
	Remaining time.Duration
	// Waiters is how many acquires are queued for the lock; -1 when the
	// store cannot tell (InspectCaps.Waiters).
	Waiters int
}

// Inspector is implemented by a Backend that can report a lock's state
// without taking it (Capabilities.Inspect says which fields it fills).
type Inspector interface {
	// Inspect reports the lock whose store key is name. A free lock is
	// LockInfo{Waiters: n} with Held false, not an error. It must not
	// change the lock's state.
	Inspect(ctx context.Context, name string) (LockInfo, error)
}

// Relabeler is implemented by a Lease whose store can change the label of
// a held lock in place (Capabilities.Inspect.Relabel).
type Relabeler interface {
	// SetLabel stores label as the holder's label, only while the lock is
	// still held under this lease's token; ErrLeaseLost if it is not.
	SetLabel(ctx context.Context, label string) error
}

// InspectCaps declares what a backend's Inspect reports. A field that is
// false is never guessed: Inspect leaves it zero (Waiters: -1). The
// conformance suite holds the backend to each true field.
type InspectCaps struct {
	// Supported: the Backend implements Inspector (held or free).
	Supported bool
	// Label: the holder's label is stored with the lock and reported.
	Label bool
	// Fence: the holder's fence is reported.
	Fence bool
	// Remaining: the store's remaining TTL is reported.
	Remaining bool
	// Waiters: the number of queued acquires is reported.
	Waiters bool
	// Relabel: a held lease's label can be changed in place (its Lease
	// implements Relabeler).
	Relabel bool
	// MaxLabel, if not 0, is the longest label in bytes the store keeps
	// (below MaxLabelLen); the portable layer refuses longer labels with
	// ErrInvalid and cuts the default label to it.
	MaxLabel int
	// LabelASCII: the store keeps only printable ASCII in a label (it
	// replaces other bytes); the portable layer refuses other labels with
	// ErrInvalid.
	LabelASCII bool
	// LabelWhere says where the label lives in the store, for humans
	// ("the lock entry", "a sibling key NAME:label", ...).
	LabelWhere string
}

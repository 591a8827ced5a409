package fencelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fencelock/fencelock/driver"
)

// LockInfo is a lock's state as the store reports it (Client.Inspect).
// What the backend cannot report is declared in
// Capabilities().Inspect and left zero here, never guessed.
type LockInfo struct {
	// Name is the lock name (without the client's prefix).
	Name string
	// Held reports whether the lock is held.
	Held bool
	// Label is the holder's AcquireOptions.Label ("" when free, or when
	// the backend does not keep labels).
	Label string
	// Fence is the holder's fence (0 when free, or unknown).
	Fence Fence
	// Remaining is how long the store keeps the lock without a renewal,
	// as the store saw it when it answered (0 when free, or unknown).
	Remaining time.Duration
	// Waiters is how many acquires are queued for the lock, or -1 when the
	// store cannot tell.
	Waiters int
	// At is the local time the store's answer arrived: the lock is held
	// until about At+Remaining unless renewed.
	At time.Time
}

// Inspect reports the state of the lock named name without taking it:
// held or free, the holder's label, fence, remaining TTL and queued
// waiters, as far as the backend can tell (Capabilities().Inspect).
// It returns an error wrapping errors.ErrUnsupported when the backend
// cannot inspect locks at all.
func (c *Client) Inspect(ctx context.Context, name string) (LockInfo, error) {
	const op = "inspect"
	if err := ValidateName(name); err != nil {
		return LockInfo{}, c.wrap(op, name, err)
	}
	if err := c.usable(ctx); err != nil {
		return LockInfo{}, c.wrap(op, name, err)
	}
	in, ok := c.b.(driver.Inspector)
	if !ok || !c.caps.Inspect.Supported {
		return LockInfo{}, c.wrap(op, name, fmt.Errorf("%w: the %s backend cannot inspect locks", errors.ErrUnsupported, c.caps.Backend))
	}
	key := c.opts.Prefix + name
	if len(key) > MaxNameLen {
		return LockInfo{}, c.wrap(op, name, fmt.Errorf("%w: lock name with prefix is %d bytes, over the %d-byte limit", ErrInvalid, len(key), MaxNameLen))
	}
	di, err := in.Inspect(ctx, key)
	if err != nil {
		return LockInfo{}, c.wrap(op, name, c.cancelErr(ctx, err))
	}
	info := LockInfo{Name: name, Held: di.Held, Label: di.Label, Fence: di.Fence, Remaining: di.Remaining, Waiters: di.Waiters, At: time.Now()}
	if !c.caps.Inspect.Waiters {
		info.Waiters = -1
	}
	if !info.Held {
		info.Label, info.Fence, info.Remaining = "", 0, 0
	}
	return info, nil
}

var defaultLabel = sync.OnceValue(func() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown-host"
	}
	l := h + "/" + strconv.Itoa(os.Getpid())
	if len(l) > MaxLabelLen {
		l = l[len(l)-MaxLabelLen:]
	}
	return l
})

// DefaultLabel is the label of a lease whose AcquireOptions.Label is
// empty: "HOST/PID" of this process.
func DefaultLabel() string { return defaultLabel() }

// ValidateLabel reports whether s can be a label: valid UTF-8 without NUL
// bytes, at most MaxLabelLen bytes.
func ValidateLabel(s string) error {
	switch {
	case len(s) > MaxLabelLen:
		return fmt.Errorf("%w: label is %d bytes, over the %d-byte limit", ErrInvalid, len(s), MaxLabelLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: label is not valid UTF-8", ErrInvalid)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return fmt.Errorf("%w: label contains a NUL byte", ErrInvalid)
		}
	}
	return nil
}

// defaultLabel is DefaultLabel, cut to the backend's MaxLabel.
func (c *Client) defaultLabel() string {
	l := DefaultLabel()
	if m := c.caps.Inspect.MaxLabel; m > 0 && len(l) > m {
		l = l[len(l)-m:] // keep the pid
		for !utf8.ValidString(l) {
			l = l[1:]
		}
	}
	if c.caps.Inspect.LabelASCII {
		b := []byte(l)
		for i, ch := range b {
			if ch < 0x20 || ch > 0x7e {
				b[i] = '?'
			}
		}
		l = string(b)
	}
	return l
}

// checkLabel is ValidateLabel plus the backend's MaxLabel.
func (c *Client) checkLabel(s string) error {
	if err := ValidateLabel(s); err != nil {
		return err
	}
	if m := c.caps.Inspect.MaxLabel; m > 0 && len(s) > m {
		return fmt.Errorf("%w: label is %d bytes, over the %s backend's %d-byte limit (Capabilities.Inspect.MaxLabel)", ErrInvalid, len(s), c.caps.Backend, m)
	}
	if c.caps.Inspect.LabelASCII {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				return fmt.Errorf("%w: the %s backend keeps only printable ASCII in labels (Capabilities.Inspect.LabelASCII)", ErrInvalid, c.caps.Backend)
			}
		}
	}
	return nil
}

// Label returns the lease's label: the one it was acquired with, or the
// last one SetLabel stored.
func (l *Lease) Label() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.label
}

// SetLabel changes the label stored with the held lock, in place, keeping
// the lease (its fence and deadline). It returns ErrLeaseLost if the lock
// is no longer ours, ErrReleased after Release, and an error wrapping
// errors.ErrUnsupported when the backend cannot relabel a held lock
// (Capabilities().Inspect.Relabel is false).
func (l *Lease) SetLabel(ctx context.Context, label string) error {
	const op = "set-label"
	if ctx == nil {
		return l.wrap(op, fmt.Errorf("%w: nil context", ErrInvalid))
	}
	if label == "" {
		label = l.c.defaultLabel()
	}
	if err := l.c.checkLabel(label); err != nil {
		return l.wrap(op, err)
	}
	rl, ok := l.dl.(driver.Relabeler)
	if !ok || !l.c.caps.Inspect.Relabel {
		return l.wrap(op, fmt.Errorf("%w: the %s backend cannot change a held lock's label", errors.ErrUnsupported, l.c.caps.Backend))
	}
	if err := l.lockOp(ctx); err != nil {
		return l.wrap(op, fmt.Errorf("waiting for a renewal in flight: %w", err))
	}
	defer l.unlockOp()
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return l.wrap(op, l.endedErr())
	}
	l.mu.Unlock()
	err := rl.SetLabel(ctx, label)
	if errors.Is(err, ErrLeaseLost) {
		l.markStoreGone()
		lost := l.lostErr("relabelling found the lock no longer ours")
		l.end(lost)
		return l.wrap(op, lost)
	}
	if err != nil {
		return l.wrap(op, err)
	}
	l.mu.Lock()
	l.label = label
	l.mu.Unlock()
	return nil
}

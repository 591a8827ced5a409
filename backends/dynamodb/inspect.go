package dynamodb

// Labels and Inspect (internals; the package doc in doc.go has what users need).
//
// The label is the item's attribute fencelockLabel (S), set by the granting
// UpdateItem (no extra request) and by SetLabel (an owner-checked write,
// like a heartbeat's). The AWS Lock Client sees it as an additional
// attribute and drops it when it writes the item itself. Inspect is one
// consistent GetItem: the lock reads as held unless the item is released or
// this Client has watched its version unchanged for its lease duration (the
// read joins the Client's observation memory); the remaining time is what
// is left of that duration since this Client first read the version (a
// Client reading for the first time sees the whole duration); waiters are
// the waitQueue's entries.

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock/driver"
)

var (
	_ driver.Inspector = (*backend)(nil)
	_ driver.Relabeler = (*lease)(nil)
)

// Inspect implements driver.Inspector with one consistent GetItem. The
// item keeps no clock: the lock reads as held unless it is released or
// this Client has watched its current version unchanged for the lease
// duration (the observation that lets it take the lock; the read joins
// this Client's observation memory). Remaining is what is left of that
// lease duration since this Client first read the version, so a Client
// that reads the item for the first time sees the whole duration.
// Waiters are fencelock's blocked Acquires in the item's waitQueue (at
// most 16; those polling for a place are not counted).
func (b *backend) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	out, err := b.get(ctx, name)
	if err != nil {
		return driver.LockInfo{}, classify(ctx, "inspect", b.cfg.Table, err)
	}
	now := time.Now()
	st, err := b.observe(name, out.Item, now)
	if err != nil {
		return driver.LockInfo{}, err
	}
	info := driver.LockInfo{Waiters: len(st.queue)}
	if st.free || st.obs.expired(now) {
		return info, nil
	}
	it, err := parseItem(name, out.Item)
	if err != nil {
		return driver.LockInfo{}, err
	}
	info.Held, info.Label, info.Fence = true, it.label, it.fence
	info.Remaining = max(st.obs.lease-now.Sub(st.obs.seen), time.Millisecond)
	return info, nil
}

// SetLabel implements driver.Relabeler: one owner-checked write, as a
// heartbeat's (it writes a new record version too, without changing the
// lease duration).
func (l *lease) SetLabel(ctx context.Context, label string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.update(ctx, "label", "SET #rvn = :new, #lb = :lb", map[string]types.AttributeValue{":lb": str(label)}, 0)
	if err == nil {
		l.label = label
	}
	return err
}

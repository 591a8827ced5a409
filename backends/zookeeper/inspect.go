package zookeeper

// Labels and Inspect (internals; the package doc in doc.go has what users need).
//
// The label is our contender node's data, which is where Curator (the
// client's address) and kazoo (its identifier) put theirs, so kazoo's
// Lock.contenders() (made with extra_lock_patterns=["-lock-"]) would list
// our labels next to its own identifiers (not tested here). SetLabel
// sets the node's data. Inspect reads the lock node's children (the lowest
// contender holds, the others wait, whichever client made them) and the
// holder node's data; the fence (a pzxid of the holder's own read) and the
// remaining TTL (the holder's timer) are not in the store and are not
// reported.

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

var (
	_ driver.Inspector = (*backend)(nil)
	_ driver.Relabeler = (*lease)(nil)
)

// Inspect implements driver.Inspector: the children of the lock path (the
// lowest contender holds, the others wait: Curator's, go-zookeeper's and
// kazoo's nodes count, as for the recipe) and the holder node's data, its
// label, read after a sync (see synced). A holder that let go between the
// two reads is read again.
func (b *backend) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	if err := b.begin(); err != nil {
		return driver.LockInfo{}, err
	}
	defer b.ops.Done()
	s, err := b.sessionFor(ctx, b.caps.MinTTL)
	if err != nil {
		return driver.LockInfo{}, err
	}
	parent := LockPath(b.root, key)
	for attempt := 0; ; attempt++ {
		children, err := call(b, ctx, synced(s, parent, func() ([]string, error) {
			c, _, err := s.conn.Children(parent)
			return c, err
		}))
		if errors.Is(err, zk.ErrNoNode) {
			return driver.LockInfo{}, nil
		}
		if err != nil {
			return driver.LockInfo{}, b.fail(ctx, "read lock queue", err)
		}
		q := scan(children, "\x00") // no node is ours
		if q.lowest == "" {
			return driver.LockInfo{}, nil
		}
		data, err := call(b, ctx, func() ([]byte, error) {
			d, _, err := s.conn.Get(parent + "/" + q.lowest)
			return d, err
		})
		if errors.Is(err, zk.ErrNoNode) && attempt < 3 {
			continue // released meanwhile: read the queue again
		}
		if err != nil {
			return driver.LockInfo{}, b.fail(ctx, "read holder's node", err)
		}
		return driver.LockInfo{Held: true, Label: string(data), Waiters: max(0, q.howMany-1)}, nil
	}
}

// SetLabel implements driver.Relabeler: it sets our node's data, which
// only this lease's session can hold.
func (l *lease) SetLabel(ctx context.Context, label string) error {
	b := l.s.b
	_, err := call(b, ctx, func() (*zk.Stat, error) { return l.s.conn.Set(l.path, []byte(label), -1) })
	if errors.Is(err, zk.ErrNoNode) {
		l.markLost()
		return driver.ErrLeaseLost
	}
	if err != nil {
		return b.fail(ctx, "set node data", err)
	}
	return nil
}

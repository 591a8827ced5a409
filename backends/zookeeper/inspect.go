package zookeeper

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

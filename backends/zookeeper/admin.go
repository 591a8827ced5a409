package zookeeper

// Admin (internals; the package doc in doc.go has what users need).
//
// driver.Admin (for the conformance suite, not handed out by Client.As): Expire deletes the holder's node;
// KillSessions closes each of the backend's sessions on the server from a
// second connection that presents the session's ID and password
// (Curator's KillSession), which deletes their nodes at once.

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// Expire deletes the node of the holder of the lock whose store key is
// key, as the end of its session would: the holder is not told (its next
// renewal finds its node gone). nil if the lock is free.
func (b *backend) Expire(ctx context.Context, key string) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.ops.Done()
	s, err := b.sessionFor(ctx, b.caps.MinTTL)
	if err != nil {
		return err
	}
	parent := LockPath(b.root, key)
	children, err := call(b, ctx, synced(s, parent, func() ([]string, error) {
		c, _, err := s.conn.Children(parent)
		return c, err
	}))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return b.fail(ctx, "read lock queue", err)
	}
	q := scan(children, "\x00") // no node is ours
	if q.lowest == "" {
		return nil
	}
	if err := b.delete(ctx, s, parent+"/"+q.lowest); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return b.fail(ctx, "delete holder's node", err)
	}
	return nil
}

// KillSessions closes every session of this backend on the server, from a
// second connection that presents the session's ID and password (Curator's
// KillSession): the server deletes their nodes at once, and go-zookeeper
// finds its session expired at its next exchange and starts a new one.
func (b *backend) KillSessions(ctx context.Context) error {
	b.mu.Lock()
	sessions := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	b.mu.Unlock()
	var errs []error
	for _, s := range sessions {
		if err := s.kill(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("zookeeper: kill sessions: %w", errors.Join(errs...))
	}
	return nil
}

var _ driver.QueueAdmin = (*backend)(nil)

// Waiters implements driver.QueueAdmin: the lock nodes under the lock's
// path, less the holder's (the lowest).
func (b *backend) Waiters(ctx context.Context, key string) (int, error) {
	if err := b.begin(); err != nil {
		return 0, err
	}
	defer b.ops.Done()
	s, err := b.sessionFor(ctx, b.caps.MinTTL)
	if err != nil {
		return 0, err
	}
	children, err := call(b, ctx, synced(s, LockPath(b.root, key), func() ([]string, error) {
		c, _, err := s.conn.Children(LockPath(b.root, key))
		return c, err
	}))
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, b.fail(ctx, "read lock queue", err)
	}
	return max(0, scan(children, "\x00").howMany-1), nil
}

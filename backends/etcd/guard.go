package etcd

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
)

// Guard is a lease's ownership condition in etcd, for data kept in etcd
// itself: an etcd Txn that compares with it commits only while the lease's
// lock key still exists with the CreateRevision it was granted with (like
// concurrency.Mutex.IsOwner). That is stronger than a fence check: the
// write is refused as soon as the lock is no longer ours in the store
// (released, expired, revoked), not only once a newer holder writes. For
// resources outside etcd use the fence (package guard).
type Guard struct {
	// Key is the lease's lock key.
	Key string
	// Rev is the key's CreateRevision, which is also the lease's fence.
	Rev int64
}

// GuardOf returns the Guard of lease l, which must have been acquired
// through c, a Client of this package (New, NewWithConfig or an etcd://
// URL). It returns l.Err() if l has ended.
func GuardOf(c *fencelock.Client, l *fencelock.Lease) (Guard, error) {
	var b *backend
	if !c.As(&b) {
		return Guard{}, fmt.Errorf("%w: etcd.GuardOf: the client is not an etcd client", fencelock.ErrInvalid)
	}
	if err := l.Err(); err != nil {
		return Guard{}, err
	}
	b.mu.Lock()
	dl := b.held[int64(l.Fence())]
	b.mu.Unlock()
	if dl == nil {
		return Guard{}, fmt.Errorf("%w: etcd.GuardOf: lease %q (fence %d) is not held through this client", fencelock.ErrLeaseLost, l.Name(), l.Fence())
	}
	if pfx, _, _ := cutLast(dl.key); !strings.HasSuffix(pfx, escape(l.Name())) {
		return Guard{}, fmt.Errorf("%w: etcd.GuardOf: lease %q was not acquired through this client", fencelock.ErrInvalid, l.Name())
	}
	return Guard{Key: dl.key, Rev: dl.rev}, nil
}

// Cmp is the Txn comparison that holds while the lease holds the lock.
func (g Guard) Cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Rev)
}

// Txn runs ops as one etcd Txn on cli only while the guard holds. If the
// lock is no longer the lease's, nothing is applied and the error wraps
// guard.ErrStale and fencelock.ErrLeaseLost. Other errors are cli's.
func (g Guard) Txn(ctx context.Context, cli *clientv3.Client, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	resp, err := cli.Txn(ctx).If(g.Cmp()).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return resp, fmt.Errorf("%w: %w: lock key %q (revision %d) is gone", guard.ErrStale, fencelock.ErrLeaseLost, g.Key, g.Rev)
	}
	return resp, nil
}

// Guarded runs ops in one etcd Txn through c's etcd client, only while l
// holds its lock: GuardOf(c, l) then Guard.Txn.
func Guarded(ctx context.Context, c *fencelock.Client, l *fencelock.Lease, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	g, err := GuardOf(c, l)
	if err != nil {
		return nil, err
	}
	var cli *clientv3.Client
	c.As(&cli)
	return g.Txn(ctx, cli, ops...)
}

// cutLast splits key at its last "/".
func cutLast(key string) (before, after string, ok bool) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return key, "", false
	}
	return key[:i], key[i+1:], true
}

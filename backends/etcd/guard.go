package etcd

import (
	"context"
	"fmt"

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

// GuardOf returns the Guard of lease l, a lease of this package's backend
// (l.As(&g) with a Guard g gives the same). It returns l.Err() if l has
// ended. c is the Client l was acquired through; it must be an etcd
// Client (Guarded uses its etcd client).
func GuardOf(c *fencelock.Client, l *fencelock.Lease) (Guard, error) {
	var cli *clientv3.Client
	if !c.As(&cli) {
		return Guard{}, fmt.Errorf("%w: etcd.GuardOf: the client is not an etcd client", fencelock.ErrInvalid)
	}
	if err := l.Err(); err != nil {
		return Guard{}, err
	}
	var g Guard
	if !l.As(&g) {
		if err := l.Err(); err != nil {
			return Guard{}, err
		}
		return Guard{}, fmt.Errorf("%w: etcd.GuardOf: lease %q is not an etcd lease", fencelock.ErrInvalid, l.Name())
	}
	return g, nil
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

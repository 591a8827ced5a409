package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lease reuse. Granting and revoking an etcd lease are raft writes (a disk
// sync each); restarting a lease's TTL with KeepAliveOnce is not (the
// leader serves it from memory). So a lease whose key Release deleted is
// kept, for a while, for the next acquisition with the same TTL through
// this backend: that acquisition restarts its TTL with a KeepAliveOnce
// instead of granting a new lease, and the release skips the revoke. A
// lease serves one acquisition at a time and carries nothing between
// them (its key was deleted, and the next key is created afresh). Pooled
// leases are revoked when the pool is full, when they get old, and on
// Close.

// maxPooled bounds the leases kept for reuse per backend.
const maxPooled = 64

type pooledLease struct {
	id        clientv3.LeaseID
	ttl       int64     // seconds
	refreshed time.Time // send time of the request that last started its TTL
}

// leaseFor returns a lease of ttl seconds for a new acquisition, reused or
// granted, the send time of the request that (re)started its TTL, and the
// TTL the server granted (at least ttl: etcd raises TTLs below its
// minimum).
func (b *backend) leaseFor(ctx context.Context, ttl int64) (clientv3.LeaseID, time.Time, int64, error) {
	for {
		p, ok := b.takePooled(ttl)
		if !ok {
			break
		}
		sent := time.Now()
		rctx, cancel := b.rpcCtx(ctx)
		ka, err := b.cli.KeepAliveOnce(rctx, p.id)
		cancel()
		if err == nil {
			return p.id, sent, max(ka.TTL, ttl), nil
		}
		if !isLeaseNotFound(err) {
			b.revokeAsync(p.id)
			return 0, time.Time{}, 0, b.fail(ctx, "refresh lease", err)
		}
		// It expired in the pool: try the next one.
	}
	sent := time.Now()
	rctx, cancel := b.rpcCtx(ctx)
	g, err := b.cli.Grant(rctx, ttl)
	cancel()
	if err != nil {
		return 0, time.Time{}, 0, b.fail(ctx, "grant lease", err)
	}
	return g.ID, sent, max(g.TTL, ttl), nil
}

// takePooled pops the most recently pooled lease of ttl seconds that is
// young enough to be alive; older ones are revoked.
func (b *backend) takePooled(ttl int64) (pooledLease, bool) {
	var stale []clientv3.LeaseID
	defer func() {
		for _, id := range stale {
			b.revokeAsync(id)
		}
	}()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.pool) - 1; i >= 0; i-- {
		p := b.pool[i]
		if p.ttl != ttl {
			continue
		}
		b.pool = append(b.pool[:i], b.pool[i+1:]...)
		if time.Since(p.refreshed) < time.Duration(ttl)*time.Second/2 {
			return p, true
		}
		stale = append(stale, p.id)
	}
	return pooledLease{}, false
}

// recycle pools a lease that no longer has a key, or revokes it.
func (b *backend) recycle(p pooledLease) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.revoke(context.Background(), p.id)
		return
	}
	var evicted pooledLease
	if len(b.pool) >= maxPooled {
		evicted = b.pool[0]
		b.pool = b.pool[1:]
	}
	b.pool = append(b.pool, p)
	b.mu.Unlock()
	if evicted.id != 0 {
		b.revokeAsync(evicted.id)
	}
}

// abandon takes a contender's key out of the queue and pools its lease;
// if the delete fails it revokes the lease (which deletes the key).
func (b *backend) abandon(ctx context.Context, c *contender) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout/2)
	resp, err := b.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", c.rev)).
		Then(clientv3.OpDelete(c.key)).
		Commit()
	cancel()
	if err != nil || !resp.Succeeded {
		b.revoke(ctx, c.id)
		return
	}
	b.recycle(pooledLease{id: c.id, ttl: c.ttl, refreshed: c.sent})
}

// revokeAsync revokes a lease in the background (Close waits for it), or
// at once after Close.
func (b *backend) revokeAsync(id clientv3.LeaseID) {
	b.mu.Lock()
	closed := b.closed
	if !closed {
		b.ops.Add(1)
	}
	b.mu.Unlock()
	if closed {
		b.revoke(context.Background(), id)
		return
	}
	go func() {
		defer b.ops.Done()
		b.revoke(context.Background(), id)
	}()
}

// drainPool revokes every pooled lease; Close calls it.
func (b *backend) drainPool() {
	b.mu.Lock()
	pool := b.pool
	b.pool = nil
	b.mu.Unlock()
	for _, p := range pool {
		b.ops.Add(1)
		go func() {
			defer b.ops.Done()
			b.revoke(context.Background(), p.id)
		}()
	}
}

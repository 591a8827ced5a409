package etcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

var (
	_ driver.Lease        = (*lease)(nil)
	_ driver.LossNotifier = (*lease)(nil)
	_ driver.GrantedTTLer = (*lease)(nil)
	_ driver.Aser         = (*lease)(nil)
)

// GrantedTTL implements driver.GrantedTTLer: the TTL etcd granted for the
// last grant or renewal, which etcd raises to its minimum lease TTL
// (1.5 × the election timeout, rounded up to whole seconds).
func (l *lease) GrantedTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.granted) * time.Second
}

// As implements driver.Aser for Lease.As. Supported targets: *Guard (the
// lease's ownership condition for etcd Txns, see Guard) and
// *clientv3.LeaseID (the etcd lease the lock key is attached to now; an
// Extend to another whole number of seconds moves it to a new one). It
// returns false once the lease was released or lost.
func (l *lease) As(target any) bool {
	select {
	case <-l.lost:
		return false
	default:
	}
	if l.releasing.Load() {
		return false
	}
	switch p := target.(type) {
	case *Guard:
		*p = Guard{Key: l.key, Rev: l.rev}
	case *clientv3.LeaseID:
		*p, _ = l.current()
	default:
		return false
	}
	return true
}

// lease is a held lock: our key, its CreateRevision (the fence) and the etcd
// lease it is attached to. The portable layer serializes Extend and Release.
type lease struct {
	b   *backend
	key string
	rev int64

	mu        sync.Mutex
	id        clientv3.LeaseID
	ttl       int64     // seconds, requested
	granted   int64     // seconds, as the server granted the last grant or renewal (≥ ttl)
	refreshed time.Time // send time of the request that last started the lease's TTL

	releasing  atomic.Bool // our own delete is coming: not a loss
	lost       chan struct{}
	lostOnce   sync.Once
	ctx        context.Context // ends the loss watch
	stop       context.CancelFunc
	watchTimer *time.Timer // starts watchLoss
	finishOnce sync.Once
}

func (l *lease) Fence() uint64 { return uint64(l.rev) }

func (l *lease) Lost() <-chan struct{} { return l.lost }

func (l *lease) current() (clientv3.LeaseID, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id, l.ttl
}

func (l *lease) pooled() pooledLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return pooledLease{id: l.id, ttl: l.ttl, refreshed: l.refreshed}
}

// Extend renews the lease. With ttl of the lease's current whole seconds it
// is a KeepAliveOnce; with another TTL it moves our key to a new etcd lease
// with that TTL (etcd cannot change a lease's TTL). Either way it then
// checks that our key still exists: ErrLeaseLost if not.
func (l *lease) Extend(ctx context.Context, ttl time.Duration) error {
	select {
	case <-l.lost:
		return fmt.Errorf("%w: etcd deleted lock key %q", driver.ErrLeaseLost, l.key)
	default:
	}
	id, cur := l.current()
	if secs := ttlSeconds(ttl); secs != cur {
		return l.moveTo(ctx, id, secs)
	}
	b := l.b
	rctx, cancel := b.rpcCtx(ctx)
	defer cancel()
	sent := time.Now()
	ka, err := b.cli.KeepAliveOnce(rctx, id)
	if err != nil {
		if isLeaseNotFound(err) {
			return fmt.Errorf("%w: etcd lease %x of lock key %q expired or was revoked", driver.ErrLeaseLost, int64(id), l.key)
		}
		return b.fail(ctx, "keep lease alive", err)
	}
	resp, err := b.cli.Get(rctx, l.key, clientv3.WithKeysOnly())
	if err != nil {
		return b.fail(ctx, "check lock key", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev {
		return fmt.Errorf("%w: lock key %q was deleted", driver.ErrLeaseLost, l.key)
	}
	l.mu.Lock()
	l.refreshed, l.granted = sent, max(ka.TTL, cur)
	l.mu.Unlock()
	return nil
}

// moveTo attaches our key to a new etcd lease of secs seconds, only while
// the key is still ours, then revokes the old lease.
func (l *lease) moveTo(ctx context.Context, old clientv3.LeaseID, secs int64) error {
	b := l.b
	sent := time.Now()
	rctx, cancel := b.rpcCtx(ctx)
	g, err := b.cli.Grant(rctx, secs)
	cancel()
	if err != nil {
		return b.fail(ctx, "grant lease", err)
	}
	rctx, cancel = b.rpcCtx(ctx)
	resp, err := b.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)).
		Then(clientv3.OpPut(l.key, "", clientv3.WithLease(g.ID))).
		Commit()
	cancel()
	if err != nil {
		// Unknown outcome: the key may be on either lease. Keep both;
		// the next Extend or Release settles it.
		return b.fail(ctx, "move lock key to a new lease", err)
	}
	if !resp.Succeeded {
		b.revoke(ctx, g.ID)
		return fmt.Errorf("%w: lock key %q was deleted", driver.ErrLeaseLost, l.key)
	}
	l.mu.Lock()
	l.id, l.ttl, l.granted, l.refreshed = g.ID, secs, max(g.TTL, secs), sent
	l.mu.Unlock()
	b.revoke(ctx, old)
	return nil
}

// Release deletes our key if it is still ours, which frees the lock, and
// keeps the lease for reuse (pool.go): a release is one write. If the delete's outcome is unknown (a member died
// under the request) it revokes the lease in the foreground instead, which
// deletes our key too; the revoke's success then counts as the release.
func (l *lease) Release(ctx context.Context) error {
	b := l.b
	defer l.end()
	l.releasing.Store(true)
	id, _ := l.current()
	// Half the request timeout: a write that a follower forwarded to a
	// leader that then died hangs until the server gives up; the revoke
	// below is a new request that the new leader serves.
	rctx, cancel := context.WithTimeout(ctx, b.timeout/2)
	resp, err := b.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)).
		Then(clientv3.OpDelete(l.key)).
		Commit()
	cancel()
	if err != nil {
		rctx, cancel := b.rpcCtx(context.WithoutCancel(ctx))
		_, rerr := b.cli.Revoke(rctx, id) // retried by clientv3: idempotent
		cancel()
		switch {
		case rerr == nil:
			return nil
		case isLeaseNotFound(rerr):
			return fmt.Errorf("%w: etcd lease %x of lock key %q had expired", driver.ErrLeaseLost, int64(id), l.key)
		}
		return b.fail(ctx, "delete lock key", err)
	}
	if !resp.Succeeded {
		b.revokeAsync(id)
		return fmt.Errorf("%w: lock key %q was already gone", driver.ErrLeaseLost, l.key)
	}
	b.recycle(l.pooled()) // its only key is gone: reuse it (see pool.go)
	return nil
}

// end stops the loss watch, or keeps it from starting, and forgets the
// lease. Release calls it.
func (l *lease) end() {
	if l.watchTimer.Stop() { // the watch never started
		l.finish()
	}
	l.forget()
}

// forget stops the loss watch and forgets the lease.
func (l *lease) forget() {
	l.stop()
	l.b.mu.Lock()
	if l.b.held[l.rev] == l {
		delete(l.b.held, l.rev)
	}
	l.b.mu.Unlock()
}

// finish tells Close that the lease's watch is over (or never ran).
func (l *lease) finish() { l.finishOnce.Do(l.b.ops.Done) }

func (l *lease) markLost() {
	if l.releasing.Load() {
		return
	}
	l.lostOnce.Do(func() { close(l.lost) })
}

// watchLoss watches our key and reports its deletion as a loss, until the
// lease is released, lost, or the backend closed. The watch starts at the
// current revision (served at once, no catch-up from history); once it is
// in place a read of the key covers the time before it.
func (l *lease) watchLoss() {
	b := l.b
	defer l.finish()
	defer l.forget()
	for l.ctx.Err() == nil && b.cli.Ctx().Err() == nil {
		if l.watchOnce() {
			l.markLost()
			return
		}
		if sleepCtx(l.ctx, 100*time.Millisecond) != nil {
			return
		}
	}
}

// watchOnce runs one watch on our key; it reports whether the key is gone.
func (l *lease) watchOnce() (gone bool) {
	b := l.b
	wctx, cancel := context.WithCancel(l.ctx)
	defer cancel()
	for wr := range b.cli.Watch(wctx, l.key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify()) {
		switch {
		case wr.Canceled || wr.Err() != nil:
			return false
		case wr.Created:
			rctx, rcancel := b.rpcCtx(l.ctx)
			resp, err := b.cli.Get(rctx, l.key, clientv3.WithKeysOnly())
			rcancel()
			if err != nil {
				return false
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev {
				return true
			}
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return true
			}
		}
	}
	return false
}

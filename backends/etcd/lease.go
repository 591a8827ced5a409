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
)

// lease is a held lock: our key, its CreateRevision (the fence) and the etcd
// lease it is attached to. The portable layer serializes Extend and Release.
type lease struct {
	b   *backend
	key string
	rev int64

	mu  sync.Mutex
	id  clientv3.LeaseID
	ttl int64 // seconds

	releasing atomic.Bool // our own delete is coming: not a loss
	lost      chan struct{}
	lostOnce  sync.Once
	ctx       context.Context // ends the loss watch
	stop      context.CancelFunc
}

func (l *lease) Fence() uint64 { return uint64(l.rev) }

func (l *lease) Lost() <-chan struct{} { return l.lost }

func (l *lease) current() (clientv3.LeaseID, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id, l.ttl
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
	if _, err := b.cli.KeepAliveOnce(rctx, id); err != nil {
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
	return nil
}

// moveTo attaches our key to a new etcd lease of secs seconds, only while
// the key is still ours, then revokes the old lease.
func (l *lease) moveTo(ctx context.Context, old clientv3.LeaseID, secs int64) error {
	b := l.b
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
	l.id, l.ttl = g.ID, secs
	l.mu.Unlock()
	b.revoke(ctx, old)
	return nil
}

// Release deletes our key if it is still ours, then revokes the lease.
func (l *lease) Release(ctx context.Context) error {
	b := l.b
	defer l.end()
	l.releasing.Store(true)
	id, _ := l.current()
	rctx, cancel := b.rpcCtx(ctx)
	resp, err := b.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)).
		Then(clientv3.OpDelete(l.key)).
		Commit()
	cancel()
	// Revoking deletes our key too if the delete did not happen; it fails
	// harmlessly if the lease already expired.
	b.revoke(ctx, id)
	if err != nil {
		return b.fail(ctx, "delete lock key", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: lock key %q was already gone", driver.ErrLeaseLost, l.key)
	}
	return nil
}

// end stops the loss watch and forgets the lease.
func (l *lease) end() {
	l.stop()
	l.b.mu.Lock()
	if l.b.held[l.rev] == l {
		delete(l.b.held, l.rev)
	}
	l.b.mu.Unlock()
}

func (l *lease) markLost() {
	if l.releasing.Load() {
		return
	}
	l.lostOnce.Do(func() { close(l.lost) })
}

// watchLoss watches our key from revision from (at which it existed) and
// reports its deletion as a loss, until the lease is released, lost, or the
// backend closed. It runs in its own goroutine, one per held lease.
func (l *lease) watchLoss(from int64) {
	b := l.b
	defer b.ops.Done()
	defer l.end()
	for l.ctx.Err() == nil && b.cli.Ctx().Err() == nil {
		wctx, cancel := context.WithCancel(l.ctx)
		for wr := range b.cli.Watch(wctx, l.key, clientv3.WithRev(from), clientv3.WithFilterPut()) {
			if wr.CompactRevision != 0 {
				break // history gone: re-check by reading the key
			}
			if wr.Err() != nil || wr.Canceled {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					cancel()
					l.markLost()
					return
				}
			}
		}
		cancel()
		if l.ctx.Err() != nil {
			return
		}
		// The watch ended early: read the key directly, then watch again.
		rctx, rcancel := b.rpcCtx(l.ctx)
		resp, err := b.cli.Get(rctx, l.key, clientv3.WithKeysOnly())
		rcancel()
		switch {
		case err == nil && (len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev):
			l.markLost()
			return
		case err == nil:
			from = resp.Header.Revision + 1
		default:
			if sleepCtx(l.ctx, 100*time.Millisecond) != nil {
				return
			}
		}
	}
}

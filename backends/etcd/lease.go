package etcd

import (
	"context"
	"errors"
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

// lease is a held lock: our key, its CreateRevision (the fence) and the TTL
// class whose etcd lease the key is attached to. The portable layer
// serializes Extend and Release. A held lease runs no goroutine: loss
// comes from the shared watch (watch.go), the class (class.go) or a
// renewal's key check (check.go), and the
// reaper is a timer.
type lease struct {
	b    *backend
	key  string
	rev  int64
	once bool // the key's Txn was sent once: its name may be reused (see freeName)

	registered time.Time // when it was registered with the watch; guarded by backend.mu
	watchFrom  int64     // the revision a watch must start at to cover it; guarded by backend.mu

	lostCtx   context.Context // done when the store dropped the lease
	lose      context.CancelFunc
	releasing atomic.Bool // our own delete is coming: not a loss

	mu        sync.Mutex
	cls       *class
	ttl       int64     // seconds, requested
	granted   int64     // seconds, as the server granted the last grant or renewal (≥ ttl)
	refreshed time.Time // send time of the request that last started the key's TTL
	reaper    *time.Timer
	gone      bool // released, lost or forgotten: the reaper stays off
}

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
// *clientv3.LeaseID (the etcd lease the lock key is attached to now: its
// TTL class's, shared with the backend's other keys of that TTL). It
// returns false once the lease was released or lost.
func (l *lease) As(target any) bool {
	if l.lostCtx.Err() != nil || l.releasing.Load() {
		return false
	}
	switch p := target.(type) {
	case *Guard:
		*p = Guard{Key: l.key, Rev: l.rev}
	case *clientv3.LeaseID:
		*p = l.class().id
	default:
		return false
	}
	return true
}

func (l *lease) Fence() driver.Fence { return driver.Fence(l.rev) }

// OnLost implements driver.LossNotifier: no goroutine per lease.
func (l *lease) OnLost(f func()) (stop func() bool) { return context.AfterFunc(l.lostCtx, f) }

func (l *lease) class() *class {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cls
}

func (l *lease) lostErr() error {
	return fmt.Errorf("%w: etcd deleted lock key %q (its lease expired or was revoked, or the key was deleted)", driver.ErrLeaseLost, l.key)
}

// Extend renews the lease. With the TTL of its class it joins the class's
// next keepalive (one sent after Extend was called, shared with the
// class's other renewals) and the linearizable read of the renewals' keys
// sent with it (check.go); with another TTL it moves our key to that
// TTL's class (a Txn that compares its CreateRevision). It returns nil
// only on a store answer, to a request sent after the call, that proves
// the key still ours, on the etcd lease whose TTL was restarted: never on
// the keepalive's answer or the shared watch's silence alone (the watch
// may lag). ErrLeaseLost if the key is gone or another's.
func (l *lease) Extend(ctx context.Context, ttl time.Duration) error {
	if l.lostCtx.Err() != nil {
		return l.lostErr()
	}
	cls := l.class()
	if secs := ttlSeconds(ttl); secs != cls.ttl {
		return l.moveTo(ctx, secs)
	}
	b := l.b
	sent, granted, st, err := cls.renew(ctx, l)
	switch {
	case errors.Is(err, errClassGone):
		l.markLost()
		return fmt.Errorf("%w: etcd lease %x of lock key %q expired or was revoked", driver.ErrLeaseLost, int64(cls.id), l.key)
	case err != nil:
		return b.fail(ctx, "keep lease alive", err)
	case st == keyGone:
		l.markLost()
		return l.lostErr()
	case st == keyMoved:
		// Still ours, on another etcd lease: a move whose outcome was
		// unknown did happen. Put it back on this class's lease.
		return l.moveTo(ctx, cls.ttl)
	}
	if l.lostCtx.Err() != nil {
		return l.lostErr()
	}
	l.renewed(sent, granted)
	return nil
}

// renewed records a renewal sent at sent and moves the reaper.
func (l *lease) renewed(sent time.Time, granted int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sent.After(l.refreshed) {
		l.refreshed = sent
	}
	l.granted = granted
	if !l.gone {
		l.reaper.Reset(time.Until(l.refreshed.Add(time.Duration(l.granted) * time.Second)))
	}
}

// checkKey reads our key: ErrLeaseLost (and the lease marked lost) if it
// is gone.
func (l *lease) checkKey(ctx context.Context) error {
	b := l.b
	rctx, cancel := b.rpcCtx(ctx)
	defer cancel()
	resp, err := b.cli.Get(rctx, l.key, clientv3.WithKeysOnly())
	if err != nil {
		return b.fail(ctx, "check lock key", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev {
		l.markLost()
		return l.lostErr()
	}
	return nil
}

// moveTo attaches our key to the class of secs seconds, only while the
// key is still ours; the Put keeps its CreateRevision (the fence) and its
// place in the queue. The old class lease stays: it is shared.
func (l *lease) moveTo(ctx context.Context, secs int64) error {
	b := l.b
	start := time.Now()
	for attempt := 0; ; attempt++ {
		cls, err := b.classFor(ctx, secs)
		if err != nil {
			return err
		}
		sent, granted := cls.state()
		if sent.Before(start) {
			// Restart its TTL after the call, as validity counts from it.
			sent, granted, err = cls.refresh(ctx, true)
			if errors.Is(err, errClassGone) && attempt < 2 {
				continue
			}
			if err != nil {
				return b.fail(ctx, "keep lease alive", err)
			}
		}
		rctx, cancel := b.rpcCtx(ctx)
		resp, err := b.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)).
			Then(clientv3.OpPut(l.key, "", clientv3.WithLease(cls.id), clientv3.WithIgnoreValue())).
			Commit()
		cancel()
		if err != nil && isLeaseNotFound(err) && attempt < 2 {
			cls.kill()
			continue
		}
		if err != nil {
			// Unknown outcome: the key is on either class lease; both
			// are alive, and the next Extend or Release settles it.
			return b.fail(ctx, "move lock key to another lease", err)
		}
		if !resp.Succeeded {
			l.markLost()
			return l.lostErr()
		}
		if !cls.add(l) {
			l.markLost()
			return l.lostErr()
		}
		l.mu.Lock()
		old := l.cls
		l.cls, l.ttl = cls, secs
		l.mu.Unlock()
		if old != cls {
			old.remove(l)
		}
		l.renewed(sent, granted)
		return nil
	}
}

// Release deletes our key, which frees the lock: one DeleteRange (see
// deleteOwn for why it cannot delete another holder's key), as
// concurrency.Mutex.Unlock; the class lease stays for the backend's other
// keys. If the key was already gone, or was not the one we were granted,
// the lease was lost: ErrLeaseLost. If the
// delete's outcome is unknown (a member died under the request) it sends
// the delete again, as a new request; if that fails too the key is left to
// the reaper (see reapLater), and the store frees it at the latest when
// its TTL passes unrenewed.
func (l *lease) Release(ctx context.Context) error {
	b := l.b
	l.releasing.Store(true)
	defer l.forget()
	// Half the request timeout: a write that a follower forwarded to a
	// leader that then died hangs until the server gives up; the retry
	// below is a new request that the new leader serves.
	var ok bool
	err := b.unreachable(ctx, func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, b.timeout/2)
		defer cancel()
		var err error
		ok, err = b.deleteOwn(rctx, l.key, l.rev)
		return err
	})
	if errors.Is(err, driver.ErrUnavailable) {
		// No endpoint accepts connections: a retry cannot do better.
		b.reapLater(l.key, l.rev)
		return fmt.Errorf("etcd delete lock key: %w", err)
	}
	if err != nil {
		// The retry stays within ctx: the caller's Release is bounded
		// (Options.ReleaseTimeout), and the reaper carries on past it.
		err = b.unreachable(ctx, func(ctx context.Context) error {
			rctx, cancel := b.rpcCtx(ctx)
			defer cancel()
			_, err := b.deleteOwn(rctx, l.key, l.rev)
			return err
		})
		if err != nil {
			b.reapLater(l.key, l.rev)
			if errors.Is(err, driver.ErrUnavailable) {
				return fmt.Errorf("etcd delete lock key: %w", err)
			}
			return b.fail(ctx, "delete lock key", err)
		}
		return nil // gone: deleted by the first request, or by expiry
	}
	if !ok {
		return fmt.Errorf("%w: lock key %q was already gone", driver.ErrLeaseLost, l.key)
	}
	if l.once {
		b.freeName(l.key)
	}
	return nil
}

// forget stops the reaper and unregisters the lease from the watch and its
// class.
func (l *lease) forget() {
	l.mu.Lock()
	l.gone = true
	if l.reaper != nil {
		l.reaper.Stop()
	}
	cls := l.cls
	l.mu.Unlock()
	cls.remove(l)
	b := l.b
	b.mu.Lock()
	if b.keys[l.key] == l {
		delete(b.keys, l.key)
	}
	b.mu.Unlock()
}

// markLost reports the store-side loss (unless our own Release is under
// way) and forgets the lease.
func (l *lease) markLost() {
	if l.releasing.Load() {
		return
	}
	l.lose()
	l.forget()
}

// reap is the reaper timer's callback. The class lease may be kept alive
// by the class's other keys, so a key whose lease is not renewed is
// deleted here once its TTL (as granted) has passed since its last
// renewal, as etcd would have with a lease of its own. The portable
// layer's deadline has passed before that.
func (l *lease) reap() {
	l.mu.Lock()
	if l.gone {
		l.mu.Unlock()
		return
	}
	if wait := time.Until(l.refreshed.Add(time.Duration(l.granted) * time.Second)); wait > 0 {
		l.reaper.Reset(wait)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	b := l.b
	rctx, cancel := b.rpcCtx(b.ctx)
	_, err := b.deleteKey(rctx, l.key, l.rev)
	cancel()
	if err != nil {
		l.mu.Lock()
		if !l.gone && b.ctx.Err() == nil {
			l.reaper.Reset(time.Second)
		}
		l.mu.Unlock()
		return
	}
	l.markLost()
}

// deleteKey deletes key if its CreateRevision is rev (any revision if rev
// is 0), and reports whether it did.
func (b *backend) deleteKey(ctx context.Context, key string, rev int64) (bool, error) {
	txn := b.cli.Txn(ctx)
	if rev != 0 {
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev))
	}
	resp, err := txn.Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// deleteOwn deletes key, a key of ours with CreateRevision rev that no
// request of ours may still create (its creating Txn was answered), with
// a plain DeleteRange, and reports whether the key it deleted was the one
// with CreateRevision rev (false: it was already gone, so the lease was
// lost).
//
// A plain delete, unlike deleteKey's compare-Txn, needs no read view and
// no comparison on the server (in etcd 3.4 that is some 80 µs of a
// ~900 µs write), and it is exactly as safe, because the name is ours
// alone: a key name is the lock prefix, the class lease's ID (unique in
// the cluster while the lease lives, and every key on it goes when it
// ends) and a number that the backend gives to one contender at a time,
// and takes back only once a request of ours deleted that key (freeName),
// which for a held key is this delete itself. So while we call it,
// nothing but our own request can have created a key of that name: if
// the key is there, it is ours. concurrency.Mutex.Unlock relies on the
// same (its key is the prefix and the session's lease ID). The PrevKv
// is checked all the same: a key of that name with another
// CreateRevision (which could only be one our own create left behind)
// is reported as a loss, never as our release.
func (b *backend) deleteOwn(ctx context.Context, key string, rev int64) (bool, error) {
	resp, err := b.cli.Delete(ctx, key, clientv3.WithPrevKV())
	if err != nil {
		return false, err
	}
	return resp.Deleted == 1 && len(resp.PrevKvs) == 1 && resp.PrevKvs[0].CreateRevision == rev, nil
}

// reapLater deletes a key whose delete failed, in the background (see
// background).
func (b *backend) reapLater(key string, rev int64) {
	b.background(func(ctx context.Context) error {
		_, err := b.deleteKey(ctx, key, rev)
		return err
	})
}

// background runs f on a goroutine, each try bounded by the request
// timeout, retrying every second until it returns nil or Close (whose
// revoke of the class leases deletes every key on them).
func (b *backend) background(f func(ctx context.Context) error) {
	b.mu.Lock()
	closed := b.closed
	if !closed {
		b.ops.Add(1)
	}
	b.mu.Unlock()
	if closed {
		return
	}
	go func() {
		defer b.ops.Done()
		for {
			rctx, cancel := b.rpcCtx(b.ctx)
			err := f(rctx)
			cancel()
			if err == nil || sleepCtx(b.ctx, time.Second) != nil {
				return
			}
		}
	}()
}

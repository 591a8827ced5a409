package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchReadyWait bounds how long a waiter waits for a watch being started
// to run before it reads the queue anyway (a read that fails surfaces an
// unavailable cluster).
const watchReadyWait = 100 * time.Millisecond

// errRequeue: our key vanished while we waited (lease expired or key
// deleted); queue again with a new lease.
var errRequeue = errors.New("etcd: our lock key vanished while waiting")

// waitTurn waits until c's key is the first under its prefix, keeping c's
// lease alive meanwhile. On success c.hdr is a revision at which c's key
// existed with no contender ahead of it. It returns errRequeue if c's key
// vanished, or an error (ctx, store); it leaves c's key in place: the caller
// deletes it on error.
//
// It waits for the deletion of the key just ahead of ours (c.pred), which
// the shared watch (watch.go) delivers, with the deletions of our own key,
// in revision order. When the key ahead was the only one ahead of ours
// (c.only), or every other key ahead of ours (c.ahead) was deleted before
// it, and our key was not deleted before it, that deletion makes us
// first as of its revision: the turn passes with no request at all.
// Otherwise the queue is read again as of that revision (check).
func (b *backend) waitTurn(ctx context.Context, c *contender) error {
	ttl := time.Duration(c.ttl) * time.Second
	ka := time.NewTimer(ttl / 3)
	defer ka.Stop()
	wt := &waiter{key: c.key, rev: c.rev, wake: make(chan struct{}, 1)}
	defer b.unregisterWait(wt)
	needCheck := c.pred == "" // enqueue told us the key ahead, as of c.hdr
	// at is a revision the next check may read at (0: the latest), one
	// that the member serving our watch has applied.
	var at int64
	for {
		if needCheck {
			needCheck = false
			if turn, err := b.recheck(ctx, c, at); err != nil || turn {
				return err
			}
		}
		if ok, ready := b.registerWait(wt, c); !ok {
			// Registered from a revision the watch does not cover
			// (compacted, or the watch started after it): read again,
			// once the watch runs if it is being started.
			if err := b.awaitWatch(ctx, ready, at); err != nil {
				return err
			}
			needCheck, at = true, 0
			continue
		}
		at = 0
		select {
		case <-ctx.Done():
			return b.fail(ctx, "wait", ctx.Err())
		case <-wt.wake:
			w := b.woken(c, wt)
			if w.err != nil || w.turn {
				return w.err
			}
			needCheck, at = w.check, w.at
		case <-ka.C:
			err := b.keepAlive(ctx, c, false)
			switch {
			case errors.Is(err, errRequeue), ctx.Err() != nil:
				return err
			case err != nil:
				ka.Reset(ttl / 10) // retry soon; the check below surfaces a dead cluster
			default:
				ka.Reset(ttl / 3)
			}
			needCheck = true // also a poll, in case a deletion was not delivered
		}
	}
}

// recheck reads the queue as of revision at (0: the latest) into c, and
// reports whether it is c's turn: no key ahead of c's. errRequeue if c's
// key is gone.
func (b *backend) recheck(ctx context.Context, c *contender, at int64) (turn bool, err error) {
	v, err := b.check(ctx, c, at)
	if err != nil {
		return false, err
	}
	if !v.own {
		return false, errRequeue
	}
	c.hdr, c.pred, c.only, c.ahead = v.hdr, v.pred, v.only, v.ahead
	return v.pred == "", nil
}

// awaitWatch waits, after a registration the watch did not cover, before
// the queue is read again: until the watch being started runs (ready, at
// most watchReadyWait), or, with no watch being started and no revision
// to read at (at 0), 10ms, so that the waiter does not spin.
func (b *backend) awaitWatch(ctx context.Context, ready <-chan struct{}, at int64) error {
	switch {
	case ready != nil:
		t := time.NewTimer(watchReadyWait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return b.fail(ctx, "wait", ctx.Err())
		case <-ready:
		case <-t.C:
		}
	case at == 0:
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return b.fail(ctx, "wait", err)
		}
	}
	return nil
}

// wakeup is what a waiter's wake tells it to do next.
type wakeup struct {
	err   error // errRequeue: our key is gone
	turn  bool  // our turn came: c.hdr and c.pred say as of when
	check bool  // read the queue again, as of revision at (0: the latest)
	at    int64
	// None set: nothing that matters changed; register again.
}

// woken reads what the shared watch delivered to wt, c's waiter.
func (b *backend) woken(c *contender, wt *waiter) wakeup {
	b.mu.Lock()
	ownGone, predGone, recheck := wt.ownGone, wt.predGone, wt.recheck
	b.mu.Unlock()
	switch {
	case ownGone != 0:
		return wakeup{err: errRequeue}
	case recheck:
		return wakeup{check: true}
	case predGone != 0 && (c.only || b.aheadGone(c, predGone)):
		// Every deletion of our key up to predGone was delivered
		// before (or with) that of the key ahead: our key existed
		// at predGone, with nothing ahead of it (the only key
		// ahead, or every key ahead as of c.hdr, deleted since:
		// a key created later is behind ours).
		c.hdr, c.pred = predGone, ""
		return wakeup{turn: true}
	case predGone != 0:
		// Read as of the deletion: whether anything is left
		// ahead of our key then.
		return wakeup{check: true, at: predGone}
	}
	return wakeup{}
}

// waiter is a contender waiting for its turn, registered with the shared
// watch. The fields after wake are guarded by backend.mu.
type waiter struct {
	key  string        // our key
	rev  int64         // its CreateRevision
	wake chan struct{} // buffered 1: something below changed

	pred     string // the key just ahead of ours
	from     int64  // a deletion of pred after this revision counts
	ownGone  int64  // revision of our key's deletion (0: none delivered)
	predGone int64  // revision of pred's deletion (0: none delivered)
	recheck  bool   // the watch no longer covers from: read again
}

func (w *waiter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// registerWait (re-)registers wt for the deletion of c.pred after c.hdr
// (and of our key), starting the shared watch if it is not running. It
// reports false if the watch does not cover c.hdr+1: the caller must read
// the queue again.
func (b *backend) registerWait(wt *waiter, c *contender) (ok bool, ready <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unregisterLocked(wt)
	select {
	case <-wt.wake:
	default:
	}
	wt.pred, wt.from, wt.ownGone, wt.predGone, wt.recheck = c.pred, c.hdr, 0, 0, false
	w := &b.watch
	b.busyLocked()
	if !w.started {
		// Not from c.hdr, a past revision, which etcd would serve late
		// (see startLocked): from now, and read the queue again once it
		// runs.
		b.startNowLocked()
	}
	if !b.coveredLocked(c.hdr) {
		if !w.live {
			return false, w.ready
		}
		return false, nil
	}
	if w.waitOwn == nil {
		w.waitOwn, w.waitPred = map[string]*waiter{}, map[string]map[*waiter]struct{}{}
	}
	w.waitOwn[wt.key] = wt
	b.busyLocked()
	set := w.waitPred[wt.pred]
	if set == nil {
		set = map[*waiter]struct{}{}
		w.waitPred[wt.pred] = set
	}
	set[wt] = struct{}{}
	// Deletions the watch delivered before we registered.
	wt.ownGone = b.deletedLocked(wt.key, wt.rev)
	wt.predGone = b.deletedLocked(wt.pred, wt.from)
	if wt.ownGone != 0 || wt.predGone != 0 {
		wt.notify()
	}
	return true, nil
}

func (b *backend) unregisterWait(wt *waiter) {
	b.mu.Lock()
	b.unregisterLocked(wt)
	b.mu.Unlock()
}

// unregisterLocked removes wt from the watch's waiters. b.mu is held.
func (b *backend) unregisterLocked(wt *waiter) {
	w := &b.watch
	if w.waitOwn[wt.key] == wt {
		delete(w.waitOwn, wt.key)
	}
	if set := w.waitPred[wt.pred]; set != nil {
		delete(set, wt)
		if len(set) == 0 {
			delete(w.waitPred, wt.pred)
		}
	}
}

// queueView is what check read of the queue around a contender's key.
type queueView struct {
	own   bool     // the contender's key still exists
	pred  string   // the key just ahead of it ("" if none)
	only  bool     // pred is the only key ahead (it is also the first under the prefix)
	ahead []string // the keys ahead of it, pred first, if at most aheadMax (see aheadOf)
	hdr   int64    // the revision read
}

// check reads, in one Txn, whether c's key still exists, which key is
// just ahead of it and whether that is the only key ahead (see
// queueView), as of revision at, or of the latest revision if at is 0.
//
// A read at a given revision is exact whenever it is served: the state
// as of a committed revision never changes. So it is served by whichever
// member the client asks, from its own store (serializable, no raft
// round, which under load waits for the next fsync); if that member has
// not applied the revision yet, or it was compacted, check reads the
// latest revision instead (linearizable).
func (b *backend) check(ctx context.Context, c *contender, at int64) (queueView, error) {
	rctx, cancel := b.rpcCtx(ctx)
	defer cancel()
	for {
		resp, err := b.cli.Txn(rctx).Then(queueOps(c, at)...).Commit()
		if err != nil && at > 0 && (errors.Is(err, rpctypes.ErrFutureRev) || errors.Is(err, rpctypes.ErrCompacted)) {
			at = 0
			continue
		}
		// A read is idempotent: during an election ("leader changed", no
		// leader) it is sent again, within the request timeout, rather
		// than ending the wait.
		if err != nil && retryable(err) && sleepCtx(rctx, 50*time.Millisecond) == nil {
			continue
		}
		if err != nil {
			return queueView{}, b.fail(ctx, "check lock queue", err)
		}
		return viewOf(c, resp, at), nil
	}
}

// The reads of queueOps, in the order of their responses.
const (
	readMine  = iota // c's key
	readAhead        // the keys ahead of it, last-created first, at most aheadMax
	readFirst        // the first key under the prefix
)

// queueOps are check's reads (readMine, readAhead, readFirst), as of
// revision at (0: the latest).
func queueOps(c *contender, at int64) []clientv3.Op {
	mineOpts := []clientv3.OpOption{clientv3.WithKeysOnly()}
	aheadOpts := append(clientv3.WithLastCreate(), clientv3.WithLimit(aheadMax), clientv3.WithMaxCreateRev(c.rev-1), clientv3.WithKeysOnly())
	first := append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())
	if at > 0 {
		pin := []clientv3.OpOption{clientv3.WithRev(at), clientv3.WithSerializable()}
		mineOpts, aheadOpts, first = append(mineOpts, pin...), append(aheadOpts, pin...), append(first, pin...)
	}
	return []clientv3.Op{
		clientv3.OpGet(c.key, mineOpts...),
		clientv3.OpGet(c.pfx+"/", aheadOpts...),
		clientv3.OpGet(c.pfx+"/", first...),
	}
}

// viewOf reads resp, the answer to queueOps(c, at).
func viewOf(c *contender, resp *clientv3.TxnResponse, at int64) queueView {
	var v queueView
	mine := resp.Responses[readMine].GetResponseRange().Kvs
	v.own = len(mine) == 1 && mine[0].CreateRevision == c.rev
	v.pred, v.ahead = aheadOf(resp.Responses[readAhead].GetResponseRange())
	if kvs := resp.Responses[readFirst].GetResponseRange().Kvs; len(kvs) > 0 {
		v.only = v.pred != "" && string(kvs[0].Key) == v.pred
	}
	v.hdr = resp.Header.Revision
	if at > 0 {
		v.hdr = at
	}
	return v
}

// aheadGone reports whether the shared watch delivered a deletion, after
// c.hdr and at or before revision at, of every key in c.ahead (the keys
// ahead of ours as of c.hdr): then none is left ahead of ours at at, as
// a key created after c.hdr is behind ours. The watch delivers deletions
// in revision order, so once it delivered one at revision at it delivered
// every one before; they are in its ring of recent deletions if it
// covers c.hdr.
func (b *backend) aheadGone(c *contender, at int64) bool {
	if len(c.ahead) == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.coveredLocked(c.hdr) {
		return false
	}
	for _, k := range c.ahead {
		if d := b.deletedLocked(k, c.hdr); d == 0 || d > at {
			return false
		}
	}
	return true
}

// keepAlive restarts the TTL of c's class lease (joining the class's
// next keepalive; urgent: at once) and, on success, moves c.sent to
// when that request was sent. errRequeue if the lease is gone.
func (b *backend) keepAlive(ctx context.Context, c *contender, urgent bool) error {
	sent, granted, err := c.cls.refresh(ctx, urgent)
	if err != nil {
		if errors.Is(err, errClassGone) {
			return errRequeue
		}
		return b.fail(ctx, "keep the waiting lease alive", err)
	}
	c.sent, c.granted = sent, granted
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

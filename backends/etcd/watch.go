package etcd

// Waiting and loss (internals; the package doc in doc.go has what users need).
//
// A blocked Acquire keeps its key (and its place in the FIFO queue) and
// waits for the deletion of the key just ahead of it. Held leases and
// waiters share one watch per Client, on every key under KeyPrefix
// (deletions only; with an empty KeyPrefix, the whole keyspace), which
// delivers deletions in revision order; a release thus wakes the one
// waiter behind it, and no herd. The watch starts with the Client's
// first waiter, or once a lease has been held for 50 ms (from the
// revision just after the lease's grant, so it still sees every deletion
// since), and stops once for a second it has had no waiter and no lease
// held that long: an idle Client, or one whose locks are short
// uncontended holds, costs the cluster no watch, and its releases none
// of the watch's work (etcd sends a watch every deletion under its
// prefix, our own too). The loss of a lease in its first 50 ms is thus
// reported up to 50 ms later, plus etcd's catch-up of a watch that starts
// in the past (up to 100 ms). The read that queues us (or the last read
// of the queue) returns the keys ahead of ours, all of them if at most
// 16. When the key just ahead is deleted, and it was the only key ahead
// of ours, or every other key ahead was deleted before it (the watch
// delivered it), with no deletion of our own key delivered before or
// with it, that proves our key first as of that revision (a key created
// later is behind ours): the turn passes with no request at all.
// Otherwise the waiter reads the queue again as of the
// deletion's revision (a serializable read at a fixed revision, which any
// member serves from its own store). Our own key is never counted first
// unless a read, or the watch up to that revision, shows it still exists
// (the check whose absence caused Jepsen's etcd 3.4.3 finding); if it is
// gone (its lease expired, or someone deleted it) the waiter queues
// again. Its class lease is kept alive while it waits, and the queue is
// read again at each keepalive (TTL/3), in case a deletion was never
// delivered.
//
// A deletion of a held key that is not our Release (lease expiry,
// revocation, etcdctl del, Admin.Expire) ends that lease as soon as the
// watch delivers it (Lease.Done, through driver.LossNotifier: no goroutine
// per lease): at once, or, in the lease's first 50 ms, once the watch
// has started for it (above). The
// watch resumes after the last revision it delivered when it breaks, and
// reads every held key (and has every waiter read its queue) after a
// compaction made it skip revisions; it keeps the latest deletions it
// delivered, so a lease or a waiter registered after a deletion of its
// keys that the watch delivered first still sees it; so it never misses
// a deletion.

import (
	"context"
	"math"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The shared watch. One watch per backend, on every key under
// Config.KeyPrefix (deletes only), reports the deletion of a held lock key
// that is not our own Release (lease expiry, revocation, etcdctl del) as a
// loss of that lease, and the deletion of the key just ahead of a waiting
// contender's as its wake-up (wait.go): one watch and one goroutine for
// any number of held leases and waiters, started with the first waiter
// or once a lease has been held for heldWatchDelay, and stopped by Close,
// or once for watchLinger it had no waiter and no lease held that long:
// an idle Client, or one whose locks are all short uncontended holds,
// costs the cluster no watch (every deletion under the prefix, our own
// releases too, is otherwise sent to every Client's watch), and a later
// need starts a new one.
//
// It never misses a deletion: a watch started for held leases starts at
// the earliest revision they need, just after the read of a key held
// since, or where the previous watch stopped; one started for a waiter at
// the revision current when etcd creates it, and the waiter reads its
// queue again once it runs (a registration from a revision the watch
// does not cover, below); a broken watch resumes at
// the revision after the last one it delivered; a lease held or a wait
// registered from a revision the watch does not cover (registered while
// the watch was being started, or before a compaction made the watch skip
// revisions) is checked with a read once it is registered. The deletions
// the watch delivered before a registration (it runs ahead of the reads
// that registrations come from) are kept in a ring of the latest ones, and
// a registration looks there for its keys; one older than the ring is
// checked with a read too. While the watch is not established, Extend
// reads the key itself (see lease.Extend).

// watchLinger is how long the watch outlives the backend's last held
// lease or waiter.
const watchLinger = time.Second

// heldWatchDelay is how long a held lease goes without the watch before
// the watch starts for it (from the revision just after its key was
// read, so it still sees every deletion since). A lock held and released
// within it never starts the watch: etcd sends a Client's watch every
// deletion under the prefix, its own releases too, so a watch kept up by
// short uncontended holds would cost every release a watch event, on the
// server and here. The price: the loss of a lease in its first
// heldWatchDelay is reported up to heldWatchDelay later (plus etcd's
// catch-up of a watch that starts in the past, up to 100 ms).
const heldWatchDelay = 50 * time.Millisecond

// recentCap is the number of delivered deletions kept for registrations
// that come after them.
const recentCap = 1024

// deletion is one delivered deletion.
type deletion struct {
	key string
	rev int64
}

// watchState is guarded by backend.mu.
type watchState struct {
	started     bool
	gen         uint64             // generation of the running watch: an older loop changes nothing
	stop        context.CancelFunc // ends the running watch
	idle        *time.Timer        // armed while the watch runs: stopIdle
	needAt      time.Time          // when the watch was last needed (see stopIdle)
	held        *time.Timer        // starts the watch for held leases (startHeld)
	heldArmed   bool               // held is armed
	ready       chan struct{}      // closed once the running watch is first established
	readyClosed bool               // ready is closed

	from int64 // every deletion at revision ≥ from is (or will be) seen
	next int64 // revision the next watch starts at
	live bool  // a watch is established

	recent     []deletion         // ring of the latest delivered deletions
	recentPos  int                // next slot of recent to write
	recentFrom int64              // every delivered deletion at revision ≥ recentFrom is in recent
	recentKey  map[string][]int64 // revisions of each key's deletions in recent, ascending

	waitOwn  map[string]*waiter              // waiting contenders by their key
	waitPred map[string]map[*waiter]struct{} // waiting contenders by the key ahead of them
}

// startLocked starts the watch at hdr+1 if it is not running. b.mu is held.
//
// etcd serves a watch that starts at a past revision from its "unsynced"
// watcher group, which it catches up every 100 ms: the deletions it
// delivers may then come up to 100 ms late. A held lease can afford that
// (its loss is reported a little later); a waiter starts the watch at
// the current revision instead (startNowLocked).
func (b *backend) startLocked(hdr int64) {
	if b.watch.started {
		return
	}
	b.launchLocked(hdr + 1)
}

// startNowLocked starts the watch at the revision current when etcd
// creates it, if it is not running: it covers nothing until it is
// established (watchState.ready), then every deletion after the revision
// its creation reported. If held leases wait for the watch (see
// heldWatchDelay), it starts where the earliest of them needs it instead.
// b.mu is held.
func (b *backend) startNowLocked() {
	if b.watch.started {
		return
	}
	b.launchLocked(b.unwatchedFromLocked())
}

// unwatchedFromLocked is the revision a watch must start at to cover
// every held lease while none is started (0 if none is held). b.mu is
// held.
func (b *backend) unwatchedFromLocked() int64 {
	var from int64
	for _, l := range b.keys {
		if from == 0 || l.watchFrom < from {
			from = l.watchFrom
		}
	}
	return from
}

// deferLocked arranges for the watch to start once a held lease has gone
// heldWatchDelay without it (startHeld). b.mu is held.
func (b *backend) deferLocked() {
	w := &b.watch
	if w.heldArmed {
		return
	}
	w.heldArmed = true
	if w.held == nil {
		w.held = time.AfterFunc(heldWatchDelay, b.startHeld)
	} else {
		w.held.Reset(heldWatchDelay)
	}
}

// startHeld is the held timer's callback: it starts the watch, from the
// revision the held leases need, if one of them has been held without
// it for heldWatchDelay, or else arms itself for the first that will be.
func (b *backend) startHeld() {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := &b.watch
	w.heldArmed = false
	if b.closed || w.started || len(b.keys) == 0 {
		return
	}
	now := time.Now()
	next := heldWatchDelay
	for _, l := range b.keys {
		d := heldWatchDelay - now.Sub(l.registered)
		if d <= 0 {
			b.launchLocked(b.unwatchedFromLocked())
			return
		}
		next = min(next, d)
	}
	w.heldArmed = true
	w.held.Reset(next)
}

// launchLocked starts a watch from revision from (0: the current one,
// covering nothing until established). b.mu is held.
func (b *backend) launchLocked(from int64) {
	w := &b.watch
	w.started, w.live = true, false
	w.gen++
	w.ready, w.readyClosed = make(chan struct{}), false
	if from == 0 {
		w.from, w.next, w.recentFrom = math.MaxInt64, 0, math.MaxInt64
	} else {
		w.from, w.next, w.recentFrom = from, from, from
	}
	w.recent, w.recentPos, w.recentKey = w.recent[:0], 0, nil
	ctx, cancel := context.WithCancel(b.ctx)
	w.stop = cancel
	w.needAt = time.Now()
	b.armIdleLocked(watchLinger)
	b.ops.Add(1)
	go b.watchLoop(ctx, w.gen)
}

// armIdleLocked arms the idle timer to fire after d. b.mu is held.
func (b *backend) armIdleLocked(d time.Duration) {
	w := &b.watch
	if w.idle == nil {
		w.idle = time.AfterFunc(d, b.stopIdle)
	} else {
		w.idle.Reset(d)
	}
}

// stopIdle is the idle timer's callback, armed while the watch runs. It
// stops the watch once it has not been needed for watchLinger: no waiter,
// and no lease held for heldWatchDelay or longer. The leases still held
// (all younger) then wait for the watch again (deferLocked), from where
// this one stopped: it delivered every deletion before w.next. A
// registration after it starts a new watch.
func (b *backend) stopIdle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := &b.watch
	if !w.started || b.closed {
		return
	}
	now := time.Now()
	if len(w.waitOwn) != 0 {
		w.needAt = now
	}
	for _, l := range b.keys {
		if now.Sub(l.registered) >= heldWatchDelay {
			w.needAt = now
			break
		}
	}
	if d := watchLinger - now.Sub(w.needAt); d > 0 {
		w.idle.Reset(d)
		return
	}
	if len(b.keys) != 0 && w.next == 0 {
		w.idle.Reset(watchLinger) // not established: nothing to resume from
		return
	}
	w.stop()
	w.started, w.live = false, false
	w.gen++ // the stopped loop may still be running: it changes nothing now
	for _, l := range b.keys {
		l.watchFrom = max(l.watchFrom, w.next)
	}
	if len(b.keys) != 0 {
		b.deferLocked()
	}
}

// busyLocked notes that a waiter was registered: the watch is needed.
// b.mu is held.
func (b *backend) busyLocked() { b.watch.needAt = time.Now() }

// coveredLocked reports whether every deletion at a revision after hdr is
// in recent or will be delivered. b.mu is held.
func (b *backend) coveredLocked(hdr int64) bool {
	w := &b.watch
	return w.started && hdr+1 >= w.from && hdr+1 >= w.recentFrom
}

// deletedLocked returns the revision of the first delivered deletion of
// key after revision after (0 if none). b.mu is held.
func (b *backend) deletedLocked(key string, after int64) int64 {
	revs := b.watch.recentKey[key] // ascending: the watch delivers in revision order
	if i, _ := slices.BinarySearch(revs, after+1); i < len(revs) {
		return revs[i]
	}
	return 0
}

// registerLocked adds a held lease to the watch. hdr is a revision at
// which l's key was ours. If the watch is not running, it starts, from
// hdr+1, once the lease has been held for heldWatchDelay (deferLocked),
// or with a waiter's. It reports whether l's key must be read because
// the watch does not cover hdr+1, and whether the watch delivered the
// key's deletion already. b.mu is held.
func (b *backend) registerLocked(l *lease, hdr int64) (check, lost bool) {
	b.keys[l.key] = l
	l.registered, l.watchFrom = time.Now(), hdr+1
	if !b.watch.started {
		b.deferLocked()
		return false, false
	}
	if b.watch.next == 0 {
		// Started at the current revision (for a waiter) and not
		// established yet: it may begin after hdr+1, and a read of our
		// key now might precede its start. Start it again from hdr+1.
		b.watch.stop()
		if !b.watch.readyClosed {
			close(b.watch.ready) // a waiter waiting for it reads again
		}
		b.launchLocked(hdr + 1)
		return false, false
	}
	if !b.coveredLocked(hdr) {
		return true, false
	}
	return false, b.deletedLocked(l.key, l.rev) != 0
}

func (b *backend) watchLive() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.watch.live
}

// watchLoop runs the shared watch of generation gen until ctx ends
// (Close, or stopIdle).
func (b *backend) watchLoop(ctx context.Context, gen uint64) {
	defer b.ops.Done()
	for ctx.Err() == nil {
		b.watchOnce(ctx, gen)
		b.mu.Lock()
		if b.watch.gen == gen {
			b.watch.live = false
		}
		b.mu.Unlock()
		if sleepCtx(ctx, 50*time.Millisecond) != nil {
			return
		}
	}
}

// watchOnce runs one watch from b.watch.next until it breaks.
//
// It speaks the Watch RPC itself, on the client's connection, rather than
// through clientv3's watcher: the events reach this goroutine straight
// from the stream, not through the watcher's two goroutines, which on a
// busy machine adds to every hand-off. (Auth, and the leader requirement,
// come with the connection and the context as for clientv3's own calls.)
func (b *backend) watchOnce(ctx context.Context, gen uint64) {
	b.mu.Lock()
	from := b.watch.next
	stale := b.watch.gen != gen
	b.mu.Unlock()
	if stale {
		return
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	st, err := b.openWatch(wctx, from)
	if err != nil {
		return
	}
	for {
		wr, err := st.Recv()
		if err != nil {
			return
		}
		if wr.CompactRevision != 0 {
			// Revisions we did not see were compacted: read every held
			// key, and watch on from now.
			b.recheckAll(gen)
			return
		}
		if wr.Canceled || !b.applyWatch(wr, gen) {
			return
		}
	}
}

// openWatch opens a Watch stream on the client's connection and asks it
// for the deletions under the backend's key prefix from revision from (0:
// from now), with progress notifications.
func (b *backend) openWatch(wctx context.Context, from int64) (pb.Watch_WatchClient, error) {
	st, err := pb.NewWatchClient(b.cli.ActiveConnection()).Watch(wctx)
	if err != nil {
		return nil, err
	}
	key, end := []byte(b.keyPrefix), []byte(clientv3.GetPrefixRangeEnd(b.keyPrefix))
	if len(key) == 0 {
		key, end = []byte{0}, []byte{0} // every key (as clientv3.WithPrefix does)
	}
	err = st.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: key, RangeEnd: end, StartRevision: from, ProgressNotify: true,
		Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT},
	}}})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// applyWatch takes in wr, a response of the watch of generation gen: the
// watch's creation, deletions (a held key's deletion loses its lease) or
// progress. It reports false if gen is no longer the shared watch's.
func (b *backend) applyWatch(wr *pb.WatchResponse, gen uint64) bool {
	var lost []*lease
	b.mu.Lock()
	if b.watch.gen != gen {
		b.mu.Unlock()
		return false
	}
	if wr.Created {
		w := &b.watch
		w.live = true
		if w.next == 0 && wr.Header != nil {
			// Started at the current revision: it covers every
			// deletion after the one its creation reports.
			rev := wr.Header.Revision + 1
			w.from, w.next, w.recentFrom = rev, rev, rev
		}
		if !w.readyClosed {
			w.readyClosed = true
			close(w.ready)
		}
	}
	for _, ev := range wr.Events {
		if ev.Type != mvccpb.DELETE {
			continue
		}
		key, rev := string(ev.Kv.Key), ev.Kv.ModRevision
		if l := b.keys[key]; l != nil && rev > l.rev {
			lost = append(lost, l)
		}
		b.deliveredLocked(key, rev)
		b.watch.next = max(b.watch.next, rev+1)
	}
	if len(wr.Events) == 0 && !wr.Created && wr.Header != nil && wr.Header.Revision != 0 {
		// A progress notification: every event up to its revision
		// was sent.
		b.watch.next = max(b.watch.next, wr.Header.Revision+1)
	}
	b.mu.Unlock()
	for _, l := range lost {
		l.markLost()
	}
	return true
}

// recheckAll restarts coverage at the current revision after a
// compaction: every held key is read once, and later watches start after
// that revision. gen is the watch's generation.
func (b *backend) recheckAll(gen uint64) {
	rctx, cancel := b.rpcCtx(b.ctx)
	defer cancel()
	resp, err := b.cli.Get(rctx, b.keyPrefix, clientv3.WithCountOnly())
	if err != nil {
		return // the next watch hits the compaction again and retries
	}
	rev := resp.Header.Revision
	b.mu.Lock()
	w := &b.watch
	if w.gen != gen {
		b.mu.Unlock()
		return // stopped while idle: nothing to recheck
	}
	w.from, w.next, w.recentFrom = rev+1, rev+1, rev+1
	w.recent, w.recentPos, w.recentKey = w.recent[:0], 0, nil
	ls := make([]*lease, 0, len(b.keys))
	for _, l := range b.keys {
		ls = append(ls, l)
	}
	for _, wt := range w.waitOwn {
		wt.recheck = true // registered from a revision no longer covered
		wt.notify()
	}
	b.mu.Unlock()
	for _, l := range ls {
		l.checkKey(b.ctx)
	}
}

// deliveredLocked records a delivered deletion of key at rev, and wakes
// the waiters it concerns. b.mu is held.
func (b *backend) deliveredLocked(key string, rev int64) {
	w := &b.watch
	if w.recentKey == nil {
		w.recentKey = map[string][]int64{}
	}
	if len(w.recent) < recentCap {
		w.recent = append(w.recent, deletion{key, rev})
	} else {
		old := w.recent[w.recentPos]
		w.recentFrom = max(w.recentFrom, old.rev+1)
		if revs := w.recentKey[old.key]; len(revs) <= 1 {
			delete(w.recentKey, old.key)
		} else {
			w.recentKey[old.key] = revs[1:] // the oldest of that key's is the ring's oldest
		}
		w.recent[w.recentPos] = deletion{key, rev}
		w.recentPos = (w.recentPos + 1) % recentCap
	}
	w.recentKey[key] = append(w.recentKey[key], rev)
	if wt := w.waitOwn[key]; wt != nil && rev > wt.rev && wt.ownGone == 0 {
		wt.ownGone = rev
		wt.notify()
	}
	for wt := range w.waitPred[key] {
		if rev > wt.from && wt.predGone == 0 {
			wt.predGone = rev
			wt.notify()
		}
	}
}

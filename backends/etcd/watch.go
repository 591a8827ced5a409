package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The shared loss watch. One watch per backend, on every key under
// Config.KeyPrefix (deletes only), reports the deletion of a held lock key
// that is not our own Release (lease expiry, revocation, etcdctl del) as a
// loss of that lease: one watch and one goroutine for any number of held
// leases, started with the first held lease and stopped by Close.
//
// It never misses a deletion: the first watch starts at the revision just
// after the first held key was read as ours; a broken watch resumes at the
// revision after the last one it delivered; a lease held from a revision
// the watch does not cover (acquired while the watch was being started,
// or before a compaction made the watch skip revisions) is checked with a
// read once it is registered. While the watch is not established, Extend
// reads the key itself (see lease.Extend).

// watchState is guarded by backend.mu.
type watchState struct {
	started bool
	from    int64 // every deletion at revision ≥ from is (or will be) seen
	next    int64 // revision the next watch starts at
	live    bool  // a watch is established
}

// register adds a held lease to the watch, starting the watch if this is
// the first. hdr is a revision at which l's key was ours. It reports
// whether l's key must be read because the watch does not cover hdr+1.
// b.mu is held.
func (b *backend) registerLocked(l *lease, hdr int64) (check bool) {
	b.keys[l.key] = l
	w := &b.watch
	if !w.started {
		w.started = true
		w.from, w.next = hdr+1, hdr+1
		b.ops.Add(1)
		go b.watchLoop()
		return false
	}
	return hdr+1 < w.from
}

func (b *backend) watchLive() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.watch.live
}

// watchLoop runs the shared watch until Close.
func (b *backend) watchLoop() {
	defer b.ops.Done()
	for b.ctx.Err() == nil {
		b.watchOnce()
		b.mu.Lock()
		b.watch.live = false
		b.mu.Unlock()
		if sleepCtx(b.ctx, 50*time.Millisecond) != nil {
			return
		}
	}
}

// watchOnce runs one watch from b.watch.next until it breaks.
func (b *backend) watchOnce() {
	b.mu.Lock()
	from := b.watch.next
	b.mu.Unlock()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(b.ctx))
	defer cancel()
	ch := b.cli.Watch(wctx, b.keyPrefix, clientv3.WithPrefix(), clientv3.WithRev(from),
		clientv3.WithFilterPut(), clientv3.WithCreatedNotify(), clientv3.WithProgressNotify())
	for wr := range ch {
		if wr.CompactRevision != 0 {
			// Revisions we did not see were compacted: read every held
			// key, and watch on from now.
			b.recheckAll()
			return
		}
		if wr.Canceled || wr.Err() != nil {
			return
		}
		var lost []*lease
		b.mu.Lock()
		if wr.Created {
			b.watch.live = true
		}
		for _, ev := range wr.Events {
			if ev.Type != clientv3.EventTypeDelete {
				continue
			}
			if l := b.keys[string(ev.Kv.Key)]; l != nil && ev.Kv.ModRevision > l.rev {
				lost = append(lost, l)
			}
			b.watch.next = max(b.watch.next, ev.Kv.ModRevision+1)
		}
		if wr.IsProgressNotify() {
			b.watch.next = max(b.watch.next, wr.Header.Revision+1)
		}
		b.mu.Unlock()
		for _, l := range lost {
			l.markLost()
		}
	}
}

// recheckAll restarts coverage at the current revision after a
// compaction: every held key is read once, and later watches start after
// that revision.
func (b *backend) recheckAll() {
	rctx, cancel := b.rpcCtx(b.ctx)
	defer cancel()
	resp, err := b.cli.Get(rctx, b.keyPrefix, clientv3.WithCountOnly())
	if err != nil {
		return // the next watch hits the compaction again and retries
	}
	rev := resp.Header.Revision
	b.mu.Lock()
	b.watch.from, b.watch.next = rev+1, rev+1
	ls := make([]*lease, 0, len(b.keys))
	for _, l := range b.keys {
		ls = append(ls, l)
	}
	b.mu.Unlock()
	for _, l := range ls {
		l.checkKey(b.ctx)
	}
}

package etcd

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// errRequeue: our key vanished while we waited (lease expired or key
// deleted); queue again with a new lease.
var errRequeue = errors.New("etcd: our lock key vanished while waiting")

// waitTurn waits until c's key is the first under its prefix, keeping c's
// lease alive meanwhile. On success c.hdr is a revision at which c's key
// existed with no contender ahead of it. It returns errRequeue if c's key
// vanished, or an error (ctx, store); it leaves c's key in place: the caller
// deletes it on error.
func (b *backend) waitTurn(ctx context.Context, c *contender) error {
	ttl := time.Duration(c.ttl) * time.Second
	ka := time.NewTimer(ttl / 3)
	defer ka.Stop()
	var w *predWatch
	defer func() { w.close() }()
	needCheck := c.pred == "" // enqueue told us the key ahead, as of c.hdr
	if !needCheck {
		w = b.watchDelete(ctx, c.pred)
	}
	for {
		if needCheck {
			needCheck = false
			own, pred, hdr, err := b.check(ctx, c)
			if err != nil {
				return err
			}
			if !own {
				return errRequeue
			}
			c.hdr = hdr
			if pred == "" {
				return nil // our turn
			}
			if w != nil && w.key != pred {
				w.close()
				w = nil
			}
			if w == nil {
				w = b.watchDelete(ctx, pred)
			}
		}
		select {
		case <-ctx.Done():
			return b.fail(ctx, "wait", ctx.Err())
		case wr, ok := <-w.ch:
			switch {
			case !ok || wr.Canceled || wr.Err() != nil:
				// Lost watch (member down, no leader): check and watch
				// again, after a short pause so a failing cluster is not
				// hammered.
				w.close()
				w = nil
				needCheck = true
				if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
					return b.fail(ctx, "wait", err)
				}
			case wr.Created:
				// The watch covers events after its creation only: if
				// anything happened since our check, check again now
				// that the watch is in place.
				needCheck = wr.Header.Revision > c.hdr
			default:
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypeDelete {
						needCheck = true
					}
				}
			}
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
			needCheck = true // also a poll, in case a watch event was lost
		}
	}
}

// check reads, in one Txn, whether c's key still exists and which key is
// just ahead of it ("" if none).
func (b *backend) check(ctx context.Context, c *contender) (own bool, pred string, hdr int64, err error) {
	rctx, cancel := b.rpcCtx(ctx)
	defer cancel()
	ahead := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(c.rev-1), clientv3.WithKeysOnly())
	resp, err := b.cli.Txn(rctx).Then(
		clientv3.OpGet(c.key, clientv3.WithKeysOnly()),
		clientv3.OpGet(c.pfx+"/", ahead...),
	).Commit()
	if err != nil {
		return false, "", 0, b.fail(ctx, "check lock queue", err)
	}
	mine := resp.Responses[0].GetResponseRange().Kvs
	own = len(mine) == 1 && mine[0].CreateRevision == c.rev
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		pred = string(kvs[0].Key)
	}
	return own, pred, resp.Header.Revision, nil
}

// keepAlive restarts the TTL of c's class lease (joining the class's
// next KeepAliveOnce; urgent: at once) and, on success, moves c.sent to
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

// predWatch watches one key for its deletion.
type predWatch struct {
	key    string
	ch     clientv3.WatchChan
	cancel context.CancelFunc
}

// watchDelete watches key for deletes from the current revision on (etcd
// serves such a watch at once), announcing its creation (WithCreatedNotify)
// so the caller can tell whether its earlier read is still current.
func (b *backend) watchDelete(ctx context.Context, key string) *predWatch {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	ch := b.cli.Watch(wctx, key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	return &predWatch{key: key, ch: ch, cancel: cancel}
}

func (w *predWatch) close() {
	if w != nil {
		w.cancel()
	}
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

package etcd

// Labels and Inspect (internals; the package doc in doc.go has what users need).
//
// The label is the value of our lock key (concurrency.Mutex and `etcdctl
// lock` write an empty value and never read it, so they still exclude us
// and we them), which is where etcd's own concurrency.Election keeps a
// leader's value: an Election on the same lock prefix reports our leader's
// label (TestElectionInterop). SetLabel rewrites the value in place while
// the key's CreateRevision is ours, keeping its lease (as
// Election.Proclaim). Inspect is one read of the lock prefix (the
// first-created key holds: its value, its CreateRevision as the fence; the
// other keys are queued waiters) and the holder's etcd lease's TimeToLive
// (whole seconds, rounded up).

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

var (
	_ driver.Inspector = (*backend)(nil)
	_ driver.Relabeler = (*lease)(nil)
)

// Inspect implements driver.Inspector with one linearizable read of the
// lock prefix (the first-created key, which holds the lock, and the
// number of keys, whose others are queued waiters) and, if held, the
// holder's etcd lease's TimeToLive, rounded up to whole seconds. The label is the holder key's value:
// "" for a concurrency.Mutex or `etcdctl lock` holder, which write none.
func (b *backend) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	pfx := b.keyPrefix + escape(name) + "/"
	rctx, cancel := b.rpcCtx(ctx)
	defer cancel()
	resp, err := b.cli.Txn(rctx).Then(
		clientv3.OpGet(pfx, clientv3.WithFirstCreate()...),
		clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return driver.LockInfo{}, b.fail(ctx, "inspect lock", err)
	}
	first := resp.Responses[0].GetResponseRange().Kvs
	count := resp.Responses[1].GetResponseRange().Count
	if len(first) == 0 {
		return driver.LockInfo{Waiters: 0}, nil
	}
	kv := first[0]
	info := driver.LockInfo{Held: true, Label: string(kv.Value), Fence: driver.Fence(kv.CreateRevision), Waiters: int(max(count-1, 0))}
	if kv.Lease != 0 {
		ttl, err := b.cli.TimeToLive(rctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return driver.LockInfo{}, b.fail(ctx, "inspect lock lease", err)
		}
		// etcd truncates the remaining TTL to whole seconds: the lease
		// has up to a second more, and never more than it was granted.
		if ttl.TTL >= 0 {
			info.Remaining = time.Duration(min(ttl.TTL+1, max(ttl.GrantedTTL, 1))) * time.Second
		}
	}
	return info, nil
}

// SetLabel implements driver.Relabeler: it rewrites our key's value, only
// while the key is still ours, keeping its lease and CreateRevision (the
// fence and the queue place), as concurrency.Election.Proclaim does.
func (l *lease) SetLabel(ctx context.Context, label string) error {
	b := l.b
	rctx, cancel := b.rpcCtx(ctx)
	defer cancel()
	resp, err := b.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)).
		Then(clientv3.OpPut(l.key, label, clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return b.fail(ctx, "relabel lock key", err)
	}
	if !resp.Succeeded {
		l.markLost()
		return l.lostErr()
	}
	return nil
}

package etcd

// Admin (internals; the package doc in doc.go has what users need).
//
// The backend implements driver.Admin, which `fencelock conformance
// --url` uses (Client.As does not hand it out): Expire deletes
// the key of a lock's holder (the first key under its prefix, any
// client's), as the expiry of a lease of its own would, without revoking
// its lease, which may carry other locks; KillSessions revokes every class
// lease of this Client (held and waiting keys).

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Expire implements driver.Admin: it deletes the key of the lock's holder
// (the key with the lowest CreateRevision under the lock's prefix),
// whichever client holds it, as the expiry of a lease of its own would.
// It does not revoke the holder's etcd lease: that lease may carry other
// locks (a fencelock TTL class, a concurrency.Session), which an expiry of
// this one lock must leave alone. The next contender in the queue, if
// any, becomes the holder. It returns nil if the lock was not held.
func (b *backend) Expire(ctx context.Context, name string) error {
	pfx := b.keyPrefix + escape(name) + "/"
	rctx, cancel := b.rpcCtx(ctx)
	defer cancel()
	resp, err := b.cli.Get(rctx, pfx, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
	if err != nil {
		return b.fail(ctx, "admin expire: read the holder", err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	kv := resp.Kvs[0]
	if _, err := b.deleteKey(rctx, string(kv.Key), kv.CreateRevision); err != nil {
		return b.fail(ctx, "admin expire: delete the holder's key", err)
	}
	return nil
}

// KillSessions implements driver.Admin: it revokes every etcd lease of
// this backend (its TTL class leases, which carry its held locks and its
// waiting acquires' queue keys), as an operator's lease revoke or a lease
// expiring during a partition would. etcd deletes their keys at once:
// held leases are lost at once, and waiting acquires queue again with new
// leases. The etcd client stays connected for later requests.
func (b *backend) KillSessions(ctx context.Context) error {
	if err := b.revokeAll(ctx); err != nil {
		return b.fail(ctx, "admin kill sessions: revoke lease", err)
	}
	return nil
}

// ProbeMinTTL returns the shortest lease TTL the etcd cluster behind cli
// honours: it grants a lease of 1 second, reads the TTL the server granted
// (etcd raises TTLs below 1.5 × its election timeout, rounded up to whole
// seconds: 2 s with etcd's default timing), and revokes it. Clients opened
// by URL probe at Open; pass the result as Config.MinTTL to New.
func ProbeMinTTL(ctx context.Context, cli *clientv3.Client) (time.Duration, error) {
	g, err := cli.Grant(ctx, 1)
	if err != nil {
		return 0, err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultRequestTimeout)
	_, _ = cli.Revoke(rctx, g.ID)
	cancel()
	if g.TTL < 1 {
		return 0, fmt.Errorf("etcd granted a lease of %d s for 1 s", g.TTL)
	}
	return time.Duration(g.TTL) * time.Second, nil
}

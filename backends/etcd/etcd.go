// Package etcd is the etcd:// backend: locks that follow etcd's own
// concurrency.Mutex protocol, with a fence taken from the cluster revision.
//
//	import (
//		clientv3 "go.etcd.io/etcd/client/v3"
//		"github.com/fencelock/fencelock/backends/etcd"
//	)
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
//	locks := etcd.New(cli, nil)
//
// # Key layout and interoperability
//
// A lock on store key K (the lock name with Options.Prefix in front) is a
// set of keys under the lock prefix
//
//	P = KeyPrefix + escape(K)
//
// one per contender: P + "/" + the contender's etcd lease ID in lowercase
// hex, with an empty value, attached to that lease. KeyPrefix is
// Config.KeyPrefix, or the URL path plus "/" (etcd://host:2379/locks gives
// "locks/"); it is used verbatim. escape replaces "%" with "%25" and "/"
// with "%2F" and leaves every other byte alone, so that two lock prefixes
// are never '/'-prefixes of each other: without it a Mutex on "a" (which
// reads every key under "a/") would see the contenders of "a/b" and block
// on them. LockPrefix computes P.
//
// The contender whose key has the lowest CreateRevision holds the lock.
// That is exactly etcd's concurrency.Mutex (and `etcdctl lock`), so a Mutex
// made with concurrency.NewMutex(session, etcd.LockPrefix(prefix, K)), or
// `etcdctl lock P`, and this backend exclude each other. Names without "/"
// or "%" map to themselves: `etcdctl lock locks/job` and the name "job"
// under etcd://host/locks share a lock.
//
// # Fences
//
// The fence is the CreateRevision of our key: a cluster-wide raft revision,
// so every later holder of the name (whose key is created later) has a
// greater one, across releases, expiry, client crashes, member restarts and
// leader elections (FenceStrict). Guard turns a lease into an etcd Txn
// comparison for data kept in etcd itself.
//
// # TTLs and leases
//
// Every acquisition holds its own etcd lease, with the lease TTL rounded up
// to whole seconds (TTLGranularity 1s), so locks expire and are lost
// independently. etcd itself raises a TTL below 1.5 × its election
// timeout, rounded up: 2 s with etcd's default 1 s election timeout (a
// stock server), 1 s with an election timeout up to 666 ms. Open by URL
// therefore asks the cluster (ProbeMinTTL: grant a 1 s lease, read the
// granted TTL, revoke it) and sets Capabilities().MinTTL to the answer, so
// shorter TTLs are rejected with ErrInvalid rather than silently raised;
// New uses Config.MinTTL (default 1 s). Every Grant and KeepAlive response
// carries the TTL etcd granted; the lease reports it (driver.GrantedTTLer,
// hence Lease.StoreTTL), and the client side still ends the lease at the
// TTL it asked for, which is safe.
//
// Renewal (Lease.Extend and auto-renew) is a lease KeepAliveOnce plus a
// check that our key still exists. etcd cannot change a lease's TTL, so
// Extend with a TTL of another whole number of seconds moves our key to a
// new lease with that TTL (a Put that keeps the key's CreateRevision, hence
// the fence and the place in the queue) and revokes the old lease.
//
// Release deletes our key, only if it is still ours. Granting and revoking
// leases are raft writes while restarting a lease's TTL is not, so the
// released lease (which has no key any more) is kept by the Client for a
// later acquisition with the same TTL, which restarts it with a
// KeepAliveOnce instead of a grant; unused ones are revoked (at the latest
// by Close) or expire. An acquire+release is thus two raft writes, the
// minimum for a queue of keys.
//
// # Waiting and loss
//
// A blocked Acquire keeps its key (and its place in the FIFO queue) and
// watches only the key just ahead of it, so a release wakes one waiter and
// no herd. The watch starts at the current revision, which etcd serves at
// once (a watch from an older revision waits for etcd's 100 ms catch-up
// loop); a read after the watch is in place covers the time before it.
// After every wake-up the waiter checks again that its own key still exists
// before it counts itself the holder (the check whose absence caused
// Jepsen's etcd 3.4.3 finding); if its key is gone (its lease expired, or
// someone deleted it) it queues again with a new lease. Its lease is kept
// alive while it waits.
//
// A held lease watches its own key, from 100 ms after the grant on (short
// holds never pay for a watch; a deletion in between is still seen): a
// deletion that is not our Release (lease expiry, revocation, etcdctl del)
// ends the lease at once (Lease.Done), as does a renewal that finds the
// lease or the key gone.
//
// # Errors
//
// A cluster that does not answer within Config.RequestTimeout (default 5 s)
// yields errors wrapping fencelock.ErrUnavailable; when the caller's ctx
// ends first the error matches the ctx error (and ErrUnavailable too if no
// endpoint was connected).
//
// # Admin
//
// The backend implements driver.Admin (Client.As(&adm) with a
// driver.Admin), which `fencelock conformance --url` uses: Expire revokes
// the etcd lease of a lock's holder (the first key under its prefix, any
// client's), deleting its key as expiry would; KillSessions revokes every
// lease of this Client (held, waiting, pooled).
//
// # As
//
// Client.As supports **clientv3.Client. Clients made by New share the
// caller's etcd client; clients opened by URL own theirs. Lease.As supports
// *Guard (see Guard; GuardOf is a helper over it) and *clientv3.LeaseID.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// Capabilities of the etcd:// backend, with the MinTTL of a cluster whose
// election timeout is at most 666 ms; a Client's Capabilities().MinTTL is
// the connected cluster's (see Config.MinTTL).
var Capabilities = driver.Capabilities{
	Backend:        "etcd",
	Fence:          driver.FenceStrict,
	FenceSource:    "CreateRevision of the lock key (raft revision)",
	MinTTL:         time.Second,
	TTLGranularity: time.Second,
	TimeAuthority:  driver.TimeServer,
	Wait:           driver.WaitQueue,
	FIFO:           true,
	NodeLoss:       driver.NodeLossQuorum,
}

// DefaultRequestTimeout bounds each etcd request when Config.RequestTimeout
// is 0.
const DefaultRequestTimeout = 5 * time.Second

// Config configures the etcd backend beyond fencelock.Options.
// The zero value (or nil) gives the defaults.
type Config struct {
	// KeyPrefix is prepended verbatim (not escaped) to every lock prefix,
	// e.g. "locks/". Default: none.
	KeyPrefix string
	// RequestTimeout bounds each etcd request; past it the cluster counts
	// as unavailable. Default: DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MinTTL is the shortest lease TTL the cluster honours, reported in
	// Capabilities().MinTTL; shorter TTLs are rejected with ErrInvalid.
	// etcd raises a lease TTL below 1.5 × its election timeout, rounded up
	// to whole seconds: 2 s with etcd's default timing (election timeout
	// 1000 ms), 1 s with an election timeout up to 666 ms. Clients opened
	// by URL ask the cluster (ProbeMinTTL) at Open; with New, 0 means 1 s
	// (pass ProbeMinTTL's result to be exact). Whatever it says, a lease
	// reports the TTL etcd granted in Lease.StoreTTL.
	MinTTL time.Duration
}

// New returns a Client that keeps its locks in etcd through cli. The caller
// keeps ownership of cli: closing the Client does not close cli. opts may
// be nil.
func New(cli *clientv3.Client, opts *fencelock.Options) *fencelock.Client {
	return NewWithConfig(cli, nil, opts)
}

// NewWithConfig is New with backend settings. cfg and opts may be nil.
func NewWithConfig(cli *clientv3.Client, cfg *Config, opts *fencelock.Options) *fencelock.Client {
	return fencelock.New(newBackend(cli, cfg, false), opts)
}

// LockPrefix returns the etcd key prefix of the lock with store key key
// (the lock name with fencelock.Options.Prefix in front) under keyPrefix
// (Config.KeyPrefix, or the URL path plus "/"). Pass it to
// concurrency.NewMutex or `etcdctl lock` to share the lock.
func LockPrefix(keyPrefix, key string) string { return keyPrefix + escape(key) }

// escape replaces "%" by "%25" and "/" by "%2F", so an escaped name has no
// "/" and distinct names never become '/'-prefixes of each other.
func escape(s string) string {
	if !strings.ContainsAny(s, "/%") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '/':
			b.WriteString("%2F")
		case '%':
			b.WriteString("%25")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ttlSeconds rounds ttl up to whole seconds, at least 1.
func ttlSeconds(ttl time.Duration) int64 {
	s := int64((ttl + time.Second - 1) / time.Second)
	return max(s, 1)
}

var (
	_ driver.Backend = (*backend)(nil)
	_ driver.Blocker = (*backend)(nil)
	_ driver.Aser    = (*backend)(nil)
	_ driver.Admin   = (*backend)(nil)
)

type backend struct {
	cli       *clientv3.Client
	ownCli    bool
	keyPrefix string
	timeout   time.Duration
	caps      driver.Capabilities

	ctx    context.Context // cancelled by Close: stops loss watchers and waits
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	ops     sync.WaitGroup // acquires in flight and loss watchers
	held    map[int64]*lease
	waiting map[clientv3.LeaseID]struct{} // leases of waiting acquires, for KillSessions
	pool    []pooledLease                 // see pool.go
}

func newBackend(cli *clientv3.Client, cfg *Config, own bool) *backend {
	b := &backend{cli: cli, ownCli: own, timeout: DefaultRequestTimeout, caps: Capabilities,
		held: map[int64]*lease{}, waiting: map[clientv3.LeaseID]struct{}{}}
	if cfg != nil {
		b.keyPrefix = cfg.KeyPrefix
		if cfg.RequestTimeout > 0 {
			b.timeout = cfg.RequestTimeout
		}
		if cfg.MinTTL > 0 {
			b.caps.MinTTL = (cfg.MinTTL + time.Second - 1).Truncate(time.Second)
		}
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b
}

func (b *backend) Capabilities() driver.Capabilities { return b.caps }

// As supports **clientv3.Client.
func (b *backend) As(target any) bool {
	switch p := target.(type) {
	case **clientv3.Client:
		*p = b.cli
	case **backend:
		*p = b
	default:
		return false
	}
	return true
}

// Close stops the loss watchers, waits for acquires in flight to clean up,
// and closes the etcd client if the backend opened it (by URL).
func (b *backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for _, l := range b.held { // loss watches not started yet never will
		if l.watchTimer.Stop() {
			l.finish()
		}
	}
	b.mu.Unlock()
	b.cancel()
	b.drainPool()
	b.ops.Wait()
	if b.ownCli && b.cli.Ctx().Err() == nil {
		if err := b.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("etcd: close client: %w", err)
		}
	}
	return nil
}

// begin registers an operation that Close must wait for.
func (b *backend) begin() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.ErrClosed
	}
	b.ops.Add(1)
	return nil
}

// contender is our key in a lock's queue, before it is granted.
type contender struct {
	pfx     string // lock prefix, without the trailing "/"
	key     string
	id      clientv3.LeaseID
	ttl     int64 // seconds, requested
	granted int64 // seconds, as the server granted (≥ ttl)
	rev     int64 // CreateRevision of key
	sent    time.Time

	held bool   // key is first under pfx (as of revision hdr)
	pred string // the key just ahead of ours, if known ("" if held or unknown)
	hdr  int64  // revision of the last read
}

// enqueue grants a lease and creates our key in one Txn (like
// concurrency.Mutex), which also reads the key just ahead of ours and the
// first key under the prefix. On error nothing is left in the store but,
// at worst, a lease with no key.
func (b *backend) enqueue(ctx context.Context, name string, ttl time.Duration) (*contender, error) {
	c := &contender{pfx: b.keyPrefix + escape(name), ttl: ttlSeconds(ttl)}
	id, sent, granted, err := b.leaseFor(ctx, c.ttl)
	if err != nil {
		return nil, err
	}
	c.id, c.sent, c.granted = id, sent, granted
	c.key = fmt.Sprintf("%s/%x", c.pfx, int64(id))
	// Before the Put, the last-created key is the one just ahead of ours.
	last := clientv3.OpGet(c.pfx+"/", append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())...)
	first := clientv3.OpGet(c.pfx+"/", append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
	// The Txn is idempotent (a retry finds our key and reads it), so it is
	// retried when a member fails under it, within the request timeout.
	rctx, cancel := b.rpcCtx(ctx)
	var resp *clientv3.TxnResponse
	for {
		resp, err = b.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0)).
			Then(last, clientv3.OpPut(c.key, "", clientv3.WithLease(id)), first).
			Else(clientv3.OpGet(c.key, clientv3.WithKeysOnly()), first).
			Commit()
		if err == nil || !retryable(err) || sleepCtx(rctx, 50*time.Millisecond) != nil {
			break
		}
	}
	cancel()
	if err != nil {
		b.revoke(ctx, c.id)
		return nil, b.fail(ctx, "create lock key", err)
	}
	c.hdr = resp.Header.Revision
	var owner []*mvccpb.KeyValue
	if resp.Succeeded {
		c.rev = resp.Header.Revision
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			c.pred = string(kvs[0].Key)
		}
		owner = resp.Responses[2].GetResponseRange().Kvs
	} else { // our key exists already (a retried request)
		c.rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
		owner = resp.Responses[1].GetResponseRange().Kvs
	}
	c.held = len(owner) == 0 || owner[0].CreateRevision == c.rev
	if c.held {
		c.pred = ""
	}
	return c, nil
}

// TryAcquire is concurrency.Mutex.TryLock: queue, and leave at once
// (deleting our key) unless we are first.
func (b *backend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	if err := b.begin(); err != nil {
		return nil, err
	}
	defer b.ops.Done()
	c, err := b.enqueue(ctx, req.Name, req.TTL)
	if err != nil {
		return nil, err
	}
	if !c.held {
		b.abandon(ctx, c)
		return nil, fmt.Errorf("%w: another contender is first under %q", driver.ErrNotAcquired, c.pfx)
	}
	if err := ctx.Err(); err != nil {
		b.revoke(ctx, c.id)
		return nil, err
	}
	return b.adopt(c), nil
}

// Acquire queues a key and waits for its turn (see the package doc).
func (b *backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	if err := b.begin(); err != nil {
		return nil, time.Time{}, err
	}
	defer b.ops.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel) // Close ends waits
	defer stop()
	for {
		c, err := b.enqueue(ctx, req.Name, req.TTL)
		if err != nil {
			return nil, time.Time{}, err
		}
		if !c.held {
			b.mu.Lock()
			b.waiting[c.id] = struct{}{}
			b.mu.Unlock()
			err = b.waitTurn(ctx, c)
			b.mu.Lock()
			delete(b.waiting, c.id)
			b.mu.Unlock()
		}
		// Refresh the lease if its last refresh is old (a long wait, a slow
		// cluster), so the portable deadline, counted from c.sent, is not
		// short.
		if err == nil && time.Since(c.sent) > time.Duration(c.ttl)*time.Second/6 {
			err = b.keepAlive(ctx, c)
		}
		if errors.Is(err, errRequeue) {
			b.revoke(ctx, c.id)
			continue
		}
		if err != nil {
			b.revoke(ctx, c.id)
			return nil, time.Time{}, err
		}
		if err := ctx.Err(); err != nil {
			b.revoke(ctx, c.id)
			return nil, time.Time{}, b.fail(ctx, "acquire", err)
		}
		return b.adopt(c), c.sent, nil
	}
}

// lossWatchDelay is how long a held lease waits before it watches its own
// key. Short holds (most of them) never pay for a watch; a deletion in the
// meantime is still seen, as the watch starts by reading the key.
const lossWatchDelay = 100 * time.Millisecond

// adopt turns a granted contender into a held lease and arms its loss
// watch.
func (b *backend) adopt(c *contender) *lease {
	l := &lease{b: b, key: c.key, rev: c.rev, id: c.id, ttl: c.ttl, granted: c.granted, refreshed: c.sent, lost: make(chan struct{})}
	l.ctx, l.stop = context.WithCancel(b.ctx)
	b.mu.Lock()
	b.held[l.rev] = l
	b.ops.Add(1) // done by l.finish
	l.watchTimer = time.AfterFunc(lossWatchDelay, l.watchLoss)
	b.mu.Unlock()
	return l
}

// revoke revokes a lease on a context detached from ctx (bounded by the
// request timeout); that deletes the keys attached to it. Failures are
// ignored: the lease then expires with its TTL.
func (b *backend) revoke(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	_, _ = b.cli.Revoke(rctx, id)
}

// rpcCtx bounds one request by the request timeout.
func (b *backend) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.timeout)
}

package etcd

// Key layout and interoperability (internals; the package doc in doc.go has what users need).
//
// A lock on store key K (the lock name with Options.Prefix in front) is a
// set of keys under the lock prefix
//
//	P = KeyPrefix + escape(K)
//
// one per contender: P + "/" + the etcd lease ID it was created on in
// lowercase hex + "_" + a number (also hex) that no other key of the
// Client uses at the same time, with the lease's label as its value (see
// Labels and Inspect), attached to that lease. (The number of a key that the Client deleted itself is used
// again, so a lock's keys stay few: etcd keeps an index entry for every
// key name until the keyspace is compacted, and reading the queue visits
// them all.) KeyPrefix is
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
// Fences (internals; the package doc in doc.go has what users need).
//
// The fence is the CreateRevision of our key: a cluster-wide raft revision,
// so every later holder of the name (whose key is created later) has a
// greater one, across releases, expiry, client crashes, member restarts and
// leader elections (FenceStrict). Guard turns a lease into an etcd Txn
// comparison for data kept in etcd itself.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// capabilities are those of the etcd:// backend, with the MinTTL of a cluster whose
// election timeout is at most 666 ms; a Client's Capabilities().MinTTL is
// the connected cluster's (see Config.MinTTL).
var capabilities = driver.Capabilities{
	Backend:        "etcd",
	Fence:          driver.FenceStrict,
	FenceSource:    "CreateRevision of the lock key (raft revision)",
	MinTTL:         time.Second,
	TTLGranularity: time.Second,
	TimeAuthority:  driver.TimeServer,
	Wait:           driver.WaitQueue,
	FIFO:           true,
	NodeLoss:       driver.NodeLossQuorum,
	// The shared watch delivers the deletion of a held key (an operator's
	// delete, Admin.Expire, a revoke): at once, or, for a lease held less
	// than heldWatchDelay (50 ms), once the watch covers it, after etcd's
	// catch-up of a watch that starts in the past (up to 100 ms).
	LossSignal: 250 * time.Millisecond,
	// A release deletes the holder's key; the waiter's watch delivers the
	// deletion and the turn passes with no request, or one read.
	ReleaseWake: 100 * time.Millisecond,
	// An expired lease is revoked by the leader's lessor, which looks for
	// expired leases every 500 ms, through raft; the revoke deletes the
	// key and the waiter's watch delivers it.
	ExpiryWake: 750 * time.Millisecond,
	// Inspect reads the lock prefix: the first-created key holds (its
	// value is the label, its CreateRevision the fence), the others
	// wait; the remaining TTL is the holder's etcd lease's TimeToLive,
	// in whole seconds.
	Inspect: driver.InspectCaps{
		Supported: true, Label: true, Fence: true, Remaining: true, Waiters: true, Relabel: true,
		LabelWhere: "the value of the holder's lock key (empty for concurrency.Mutex and etcdctl lock, which ignore values)",
	},
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
// keeps ownership of cli: closing the Client does not close cli. cfg and
// opts may be nil (nil cfg: the defaults Config documents). New does no
// I/O; a nil cli or a negative Config duration is an error matching
// fencelock.ErrInvalid.
func New(cli *clientv3.Client, cfg *Config, opts *fencelock.Options) (*fencelock.Client, error) {
	var err error
	switch {
	case cli == nil:
		err = fmt.Errorf("%w: etcd.New with a nil etcd client", fencelock.ErrInvalid)
	case cfg != nil && (cfg.RequestTimeout < 0 || cfg.MinTTL < 0):
		err = fmt.Errorf("%w: etcd.New: negative Config.RequestTimeout or Config.MinTTL", fencelock.ErrInvalid)
	}
	if err != nil {
		return nil, &fencelock.Error{Op: "open", Backend: capabilities.Backend, Err: err}
	}
	return fencelock.New(newBackend(cli, cfg, false), opts), nil
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

	ctx    context.Context // cancelled by Close: stops the watch, waits and keepalives
	cancel context.CancelFunc
	seq    atomic.Uint64 // makes lock key names unique (see keyName)

	// Lock order: class.mu before mu before lease.mu; nothing else
	// nests.
	mu      sync.Mutex
	closed  bool
	ops     sync.WaitGroup    // acquires in flight and background work
	classes map[int64]*class  // TTL classes by TTL in seconds (class.go)
	free    map[string]uint64 // freed key numbers by key stem (see keyName)
	keys    map[string]*lease // held leases by lock key (watch.go)
	watch   watchState        // the shared loss watch (watch.go)

	ka kaStream // the shared keepalive stream (keepalive.go); ka.mu before mu
}

func newBackend(cli *clientv3.Client, cfg *Config, own bool) *backend {
	b := &backend{cli: cli, ownCli: own, timeout: DefaultRequestTimeout, caps: capabilities,
		classes: map[int64]*class{}, keys: map[string]*lease{}, free: map[string]uint64{}}
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
	default:
		return false
	}
	return true
}

// Close stops the loss watch, waits for acquires in flight to clean up,
// revokes the TTL class leases (which deletes any key left on them), and
// closes the etcd client if the backend opened it (by URL). Each revoke is
// bounded by the request timeout; when no endpoint accepts connections
// Close gives up on them at once (the keys then go with their TTL).
func (b *backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	if b.watch.idle != nil {
		b.watch.idle.Stop()
	}
	if b.watch.held != nil {
		b.watch.held.Stop()
	}
	b.mu.Unlock()
	b.cancel()
	b.ops.Wait()
	b.mu.Lock()
	for _, l := range b.keys { // reapers off: the revoke below deletes the keys
		l.mu.Lock()
		l.gone = true
		if l.reaper != nil {
			l.reaper.Stop()
		}
		l.mu.Unlock()
	}
	b.mu.Unlock()
	_ = b.revokeAll(context.Background())
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
	label   string // the key's value (AcquireRequest.Label)
	cls     *class // the TTL class whose lease the key is attached to
	ttl     int64  // seconds, requested
	granted int64  // seconds, as the server granted (≥ ttl)
	rev     int64  // CreateRevision of key (0: unknown)
	sent    time.Time

	once  bool     // the Txn that created key was sent once (no retry may apply later)
	held  bool     // key is first under pfx (as of revision hdr)
	pred  string   // the key just ahead of ours, if known ("" if held or unknown)
	only  bool     // pred is the only key ahead of ours
	ahead []string // every key ahead of ours, pred first, if at most aheadMax (else nil)
	hdr   int64    // revision of the last read
}

// keyName is a new lock key under pfx on cls's lease: the lease ID in hex,
// as concurrency.Mutex names its keys, then "_" and a number that no other
// key of the backend uses at the same time, so that the class's
// contenders for one lock are distinct keys.
//
// The number of a key that our own request deleted is used again (see
// freeName): etcd keeps an index entry for every key name until the
// keyspace is compacted, and a read of the queue (the first key under the
// prefix, sorted by CreateRevision) visits all of them, so fresh names
// for every acquisition would make each acquisition slower than the last
// on a cluster that is not compacted often.
func (b *backend) keyName(pfx string, cls *class) string {
	stem := pfx + "/" + cls.hex + "_" // %x of the ID, as concurrency.Mutex
	b.mu.Lock()
	n, ok := b.free[stem]
	if ok {
		delete(b.free, stem)
	}
	b.mu.Unlock()
	if !ok {
		n = b.seq.Add(1)
	}
	return stem + strconv.FormatUint(n, 16)
}

// maxFree bounds the freed key numbers kept for reuse.
const maxFree = 4096

// freeName makes the number of key available again. Call it only once a
// request of ours has deleted key (any CreateRevision), with no other
// request that might create it still in flight (the Txn that created it
// was sent once, and answered): every other operation
// on a key name compares its CreateRevision, so none can act on the next
// key of that name.
func (b *backend) freeName(key string) {
	i := strings.LastIndexByte(key, '_')
	if i < 0 {
		return
	}
	n, err := strconv.ParseUint(key[i+1:], 16, 64)
	if err != nil {
		return
	}
	b.mu.Lock()
	if len(b.free) < maxFree {
		b.free[key[:i+1]] = n
	}
	b.mu.Unlock()
}

// enqueue creates our key, attached to the lease of its TTL class, in one
// Txn (like concurrency.Mutex), which also reads the queue: for a
// TryAcquire the first key under the prefix, for a blocking Acquire the
// keys ahead of ours (see createKey). The key's TTL must count from
// c.sent: for TryAcquire (try) the portable layer counts validity from
// the call, so the class lease's TTL is restarted after it, by a
// keepalive sent alongside the Txn (shared with other callers); a
// blocking Acquire reports c.sent itself and only refreshes a class whose
// last refresh is older than TTL/6. On error nothing is left in the store.
func (b *backend) enqueue(ctx context.Context, name, label string, ttl time.Duration, try, timed bool) (*contender, error) {
	c := &contender{pfx: b.keyPrefix + escape(name), label: label, ttl: ttlSeconds(ttl)}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		retry := attempt < 2
		cls, err := b.classFor(ctx, c.ttl)
		if err != nil {
			return nil, err
		}
		c.cls = cls
		c.sent, c.granted = cls.state()
		var r *refreshReq
		age, full := time.Since(c.sent), time.Duration(c.ttl)*time.Second
		if !timed && try && c.sent.Before(start) || age > full/6 {
			if r, err = cls.join(true); err != nil {
				if retry {
					continue
				}
				return nil, b.fail(ctx, "keep lease alive", err)
			}
		}
		c.key, c.rev = b.keyName(c.pfx, cls), 0
		err = b.createKey(ctx, c, !try)
		if err != nil && isLeaseNotFound(err) && retry {
			cls.kill()
			continue
		}
		if err != nil {
			b.removeKey(ctx, c)
			return nil, b.fail(ctx, "create lock key", err)
		}
		if r != nil {
			sent, granted, err := r.wait(ctx)
			if err != nil {
				b.removeKey(ctx, c)
				if errors.Is(err, errClassGone) && retry {
					continue
				}
				return nil, b.fail(ctx, "keep lease alive", err)
			}
			c.sent, c.granted = sent, granted
		} else if timed && age > full/12 {
			_, _ = cls.join(false) // getting old: refresh in the background
		}
		return c, nil
	}
}

// createKey creates c.key on c's class lease (see enqueue) and reads the
// queue in the same Txn. withPred (a blocking Acquire) reads the keys
// ahead of ours before the Put, last-created first, up to aheadMax: they
// are exactly the keys created before ours, so they alone tell whether
// ours is first (none), the key just ahead, and whether it is the only
// one; the Txn is then one read and one Put. Without it (a TryAcquire,
// which leaves unless it is first) the Txn reads the first key after the
// Put instead.
// The read options of createKey, made once: clientv3 builds each option
// list anew (closures and slices) on every call, and they are pure.
var (
	firstCreatedKey = append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())
	lastCreatedKeys = append(clientv3.WithLastCreate(), clientv3.WithLimit(aheadMax), clientv3.WithKeysOnly())
)

func (b *backend) createKey(ctx context.Context, c *contender, withPred bool) error {
	dir := c.pfx + "/"
	first := clientv3.OpGet(dir, firstCreatedKey...)
	then := []clientv3.Op{clientv3.OpPut(c.key, c.label, clientv3.WithLease(c.cls.id)), first}
	if withPred {
		// Before the Put, the keys under the prefix are the ones ahead of
		// ours, the last-created just ahead.
		last := clientv3.OpGet(dir, lastCreatedKeys...)
		then = []clientv3.Op{last, clientv3.OpPut(c.key, c.label, clientv3.WithLease(c.cls.id))}
	}
	// The Txn is idempotent (a retry finds our key and reads it), so it is
	// retried when a member fails under it, within the request timeout.
	rctx, cancel := b.rpcCtx(ctx)
	defer cancel()
	c.held, c.pred, c.only, c.ahead = false, "", false, nil
	var resp *clientv3.TxnResponse
	var err error
	c.once = true
	for ; ; c.once = false {
		resp, err = b.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(c.tomb()), "=", 0)).
			Then(then...).
			Else(clientv3.OpGet(c.key, clientv3.WithKeysOnly()), first).
			Commit()
		if err == nil || !retryable(err) || sleepCtx(rctx, 50*time.Millisecond) != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	c.hdr = resp.Header.Revision
	var owner []*mvccpb.KeyValue
	switch {
	case resp.Succeeded && withPred:
		c.rev = resp.Header.Revision
		r := resp.Responses[0].GetResponseRange()
		c.pred, c.ahead = aheadOf(r)
		// Every key ahead of ours was read (none: ours is first) unless
		// there are more than aheadMax (at least two).
		c.held = c.pred == ""
		c.only = c.pred != "" && len(r.Kvs) == 1 && !r.More
		return nil
	case resp.Succeeded:
		c.rev = resp.Header.Revision
		owner = resp.Responses[1].GetResponseRange().Kvs
	default: // our key exists already (a retried request)
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return errors.New("etcd: lock key abandoned while being created")
		}
		c.rev = kvs[0].CreateRevision
		owner = resp.Responses[1].GetResponseRange().Kvs
	}
	c.held = len(owner) == 0 || owner[0].CreateRevision == c.rev
	if c.held {
		c.pred, c.ahead = "", nil
	}
	c.only = c.pred != "" && len(owner) > 0 && string(owner[0].Key) == c.pred
	return nil
}

// aheadMax bounds the keys ahead of ours that a waiter reads and follows
// (see contender.ahead and waitTurn); behind a longer queue it follows
// only the key just ahead.
const aheadMax = 16

// aheadOf returns the key just ahead of ours and, if the read returned
// every key ahead (at most aheadMax), all of them, from r: a read of the
// keys ahead of ours, last-created first, limited to aheadMax.
func aheadOf(r *pb.RangeResponse) (pred string, ahead []string) {
	if r == nil || len(r.Kvs) == 0 {
		return "", nil
	}
	pred = string(r.Kvs[0].Key)
	if r.More {
		return pred, nil
	}
	ahead = make([]string, len(r.Kvs))
	for i, kv := range r.Kvs {
		ahead[i] = string(kv.Key)
	}
	return pred, ahead
}

// tomb is the key whose existence makes the Txn that creates c.key fail
// (see removeKey). It is outside every lock prefix: P + "%00" + the key's
// suffix, and an escaped name never has "%0".
func (c *contender) tomb() string {
	suffix := c.key // strings.TrimPrefix(c.key, c.pfx+"/"), without building c.pfx+"/"
	if len(suffix) > len(c.pfx) && strings.HasPrefix(suffix, c.pfx) && suffix[len(c.pfx)] == '/' {
		suffix = suffix[len(c.pfx)+1:]
	}
	return c.pfx + "%00" + suffix
}

// removeKey takes a contender's key out of the queue, on a context
// detached from ctx; if that fails, in the background (reapLater).
//
// If the Txn that creates the key had an unknown outcome (c.rev 0), it may
// still be applied after the delete (a request cancelled on our side may
// be proposed late on the server's). So the delete also creates the key's
// tomb, on the class lease, in one Txn: a create applied later finds the
// tomb and fails. The tomb is deleted after twice the request timeout.
func (b *backend) removeKey(ctx context.Context, c *contender) {
	if c.rev != 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout/2)
		_, err := b.deleteKey(rctx, c.key, c.rev)
		cancel()
		if err != nil {
			b.reapLater(c.key, c.rev)
			return
		}
		if c.once {
			b.freeName(c.key)
		}
		return
	}
	key, tomb, id := c.key, c.tomb(), c.cls.id
	bury := func(ctx context.Context) error {
		_, err := b.cli.Txn(ctx).Then(clientv3.OpPut(tomb, "", clientv3.WithLease(id)), clientv3.OpDelete(key)).Commit()
		if isLeaseNotFound(err) {
			return nil // the key, if ever created, went with the lease
		}
		return err
	}
	unbury := func() {
		time.AfterFunc(2*b.timeout, func() {
			b.background(func(ctx context.Context) error {
				_, err := b.deleteKey(ctx, tomb, 0)
				return err
			})
		})
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout/2)
	err := bury(rctx)
	cancel()
	if err == nil {
		unbury()
		return
	}
	b.background(func(ctx context.Context) error {
		if err := bury(ctx); err != nil {
			return err
		}
		unbury()
		return nil
	})
}

// TryAcquire is concurrency.Mutex.TryLock: queue, and leave at once
// (deleting our key) unless we are first.
func (b *backend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, _, err := b.tryAcquire(ctx, req, false)
	return l, err
}

// TryAcquireAt implements driver.TimedTryAcquirer: TryAcquire without the
// class lease's keepalive when its last refresh is recent (at most TTL/6
// old, as a blocking Acquire allows; one older than TTL/12 is refreshed in
// the background for the next grant). The grant is then one Txn, as
// concurrency.Mutex's is, and sent is that last refresh's send time.
func (b *backend) TryAcquireAt(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	return b.tryAcquire(ctx, req, true)
}

// tryAcquire is one attempt; timed: see TryAcquireAt.
func (b *backend) tryAcquire(ctx context.Context, req driver.AcquireRequest, timed bool) (driver.Lease, time.Time, error) {
	if err := b.begin(); err != nil {
		return nil, time.Time{}, err
	}
	defer b.ops.Done()
	c, err := b.enqueue(ctx, req.Name, req.Label, req.TTL, true, timed)
	if err != nil {
		return nil, time.Time{}, err
	}
	if !c.held {
		b.removeKey(ctx, c)
		return nil, time.Time{}, fmt.Errorf("%w: another contender is first under %q", driver.ErrNotAcquired, c.pfx)
	}
	if err := ctx.Err(); err != nil {
		b.removeKey(ctx, c)
		return nil, time.Time{}, err
	}
	l, err := b.adopt(ctx, c)
	if err != nil {
		return nil, time.Time{}, err
	}
	return l, c.sent, nil
}

// Acquire queues a key and waits for its turn (see Waiting and loss, atop watch.go).
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
		c, err := b.enqueue(ctx, req.Name, req.Label, req.TTL, false, false)
		if err != nil {
			return nil, time.Time{}, err
		}
		if !c.held {
			err = b.waitTurn(ctx, c)
		}
		// The portable deadline counts from c.sent: the last refresh of
		// the class lease (others' refreshes while we waited count too).
		// If it is old (a long wait, a slow cluster) refresh it now, so
		// the deadline is not short; if it is getting old, refresh it in
		// the background, so the next grant need not wait for it.
		if err == nil {
			c.sent, c.granted = c.cls.state()
			switch age, ttl := time.Since(c.sent), time.Duration(c.ttl)*time.Second; {
			case age > ttl/6:
				err = b.keepAlive(ctx, c, true)
			case age > ttl/12:
				_, _ = c.cls.join(false)
			}
		}
		if errors.Is(err, errRequeue) {
			b.removeKey(ctx, c)
			continue
		}
		if err != nil {
			b.removeKey(ctx, c)
			return nil, time.Time{}, err
		}
		if err := ctx.Err(); err != nil {
			b.removeKey(ctx, c)
			return nil, time.Time{}, b.fail(ctx, "acquire", err)
		}
		l, err := b.adopt(ctx, c)
		if err != nil {
			return nil, time.Time{}, err
		}
		return l, c.sent, nil
	}
}

// adopt turns a granted contender into a held lease: registered with the
// shared loss watch and its class, with its reaper armed.
func (b *backend) adopt(ctx context.Context, c *contender) (*lease, error) {
	l := &lease{b: b, key: c.key, rev: c.rev, once: c.once, cls: c.cls, ttl: c.ttl, granted: c.granted, refreshed: c.sent}
	l.lostCtx, l.lose = context.WithCancel(context.Background())
	l.mu.Lock()
	l.reaper = time.AfterFunc(time.Until(c.sent.Add(time.Duration(c.granted)*time.Second)), l.reap)
	l.mu.Unlock()
	b.mu.Lock()
	check, gone := b.registerLocked(l, c.hdr)
	b.mu.Unlock()
	if gone || !c.cls.add(l) {
		l.markLost()
		return l, nil // lost already: the portable layer ends it at once
	}
	if check {
		if err := l.checkKey(ctx); err != nil && !errors.Is(err, driver.ErrLeaseLost) {
			l.releasing.Store(true)
			l.forget()
			b.removeKey(ctx, c)
			return nil, err
		}
	}
	return l, nil
}

// rpcCtx bounds one request by the request timeout.
func (b *backend) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.timeout)
}

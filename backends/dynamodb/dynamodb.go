package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// API is the part of the DynamoDB client the backend uses; *ddb.Client
// implements it.
type API interface {
	GetItem(ctx context.Context, in *ddb.GetItemInput, optFns ...func(*ddb.Options)) (*ddb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *ddb.UpdateItemInput, optFns ...func(*ddb.Options)) (*ddb.UpdateItemOutput, error)
}

// Config configures the backend. Only Table is required.
type Config struct {
	// Table is the lock table: partition key "key" of type S, no sort key
	// (the AWS DynamoDB Lock Client's default layout). Required.
	Table string
	// Owner is written, with each grant's random token, into ownerName
	// ("<Owner>/<token>"), for operators reading the table.
	// Default: the host name.
	Owner string
	// PollInterval is how often a blocked Acquire reads a held lock's item.
	// A released lock is taken at the next poll, an expired one (its
	// version unchanged for its lease duration) at the first poll after.
	// It is the longest wait between two reads: each wait is uniform
	// between half the interval and the interval (jitter), so a released
	// lock is taken within PollInterval plus a read and a write. Default:
	// the held item's lease duration / 20, between 10ms and 200ms.
	PollInterval time.Duration
	// MixedFleet declares that clients other than fencelock (the AWS Lock
	// Client with its defaults) use the table: they replace or delete items,
	// which wipes the fence counter, so fences are only time-floored
	// (Capabilities.Fence is FenceTimeFloored instead of FenceStrict). It
	// changes the declaration, not the protocol. Default: false.
	MixedFleet bool
}

// MinTTL is the shortest lease TTL the backend accepts. Expiry is decided
// by the waiters' own observation, so the lease must span several round
// trips and polls.
const MinTTL = 100 * time.Millisecond

// cleanupTimeout bounds the write TryAcquire makes, on a detached context,
// to release what an attempt of unknown outcome may have taken.
const cleanupTimeout = 2 * time.Second

// New returns a Client that keeps its locks as items of cfg.Table through
// client (a *ddb.Client). The table must exist (see CreateTable). opts may
// be nil. New does no I/O; it panics if client is nil or cfg.Table empty.
//
// The Client does not own client. Give client a per-request timeout (an
// http.Client Timeout): the SDK has none by default, and a TryAcquire or
// Release without a ctx deadline would wait on a hung connection.
func New(client API, cfg Config, opts *fencelock.Options) *fencelock.Client {
	if client == nil || cfg.Table == "" {
		panic("fencelock/backends/dynamodb: New with a nil client or an empty table name")
	}
	return fencelock.New(newBackend(client, cfg, nil), opts)
}

// backend is the DynamoDB driver. It implements driver.Backend,
// driver.Blocker, driver.Admin and driver.Aser.
type backend struct {
	api     API
	cfg     Config
	caps    driver.Capabilities
	mem     memory
	cut     atomic.Int64 // KillSessions epoch
	closeFn func()       // closes what the backend owns (URL-opened clients)
}

var (
	_ driver.Backend = (*backend)(nil)
	_ driver.Blocker = (*backend)(nil)
	_ driver.Admin   = (*backend)(nil)
	_ driver.Aser    = (*backend)(nil)
)

func newBackend(api API, cfg Config, closeFn func()) *backend {
	if cfg.Owner == "" {
		cfg.Owner, _ = os.Hostname()
		if cfg.Owner == "" {
			cfg.Owner = "fencelock"
		}
	}
	b := &backend{api: api, cfg: cfg, closeFn: closeFn}
	b.caps = driver.Capabilities{
		Backend:        "dynamodb",
		Fence:          driver.FenceStrict,
		FenceSource:    "numeric attribute fence of the lock item, incremented (if_not_exists(fence, client clock µs) + 1) in the conditional UpdateItem that grants; the item is never deleted by fencelock",
		MinTTL:         MinTTL,
		TTLGranularity: time.Millisecond,
		TimeAuthority:  driver.TimeClient,
		Wait:           driver.WaitPoll,
		FIFO:           false,
		NodeLoss:       driver.NodeLossQuorum,
	}
	if cfg.MixedFleet {
		b.caps.Fence = driver.FenceTimeFloored
		b.caps.FenceSource += "; mixed fleet: AWS Lock Client writers replace or delete the item, and the next fence restarts from the client clock in µs"
	}
	return b
}

func (b *backend) Capabilities() driver.Capabilities { return b.caps }

// state is what a read found: the lock is free (no item, or released), or
// held under the observation in force.
type state struct {
	free bool
	obs  observation
}

// takeable reports whether a write may take the lock at now.
func (s state) takeable(now time.Time) bool { return s.free || s.obs.expired(now) }

// TryAcquire makes one conditional write: take the lock if it has no item,
// is released, or is held under a version this Client has watched
// unchanged for its whole lease duration. If the write is refused, one
// consistent read records what holds the lock (for a later attempt), and
// if the read finds the lock free or expired, one more write is made.
func (b *backend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, st, err := b.try(ctx, req)
	if errors.Is(err, driver.ErrNotAcquired) && st.takeable(time.Now()) {
		l, _, err = b.try(ctx, req)
	}
	return l, err
}

// Acquire implements driver.Blocker: it reads the item with a consistent
// GetItem at least every PollInterval (jittered), and writes when the lock
// is free or the watched version has stayed unchanged for its lease
// duration. A released lock is thus taken at most one poll interval plus
// a read and a write after its release.
func (b *backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	for {
		sent := time.Now()
		l, st, err := b.try(ctx, req)
		if err == nil {
			return l, sent, nil
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			return nil, time.Time{}, err
		}
		for !st.takeable(time.Now()) {
			d := b.pollDelay(st)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, time.Time{}, context.Cause(ctx)
			case <-t.C:
			}
			if st, err = b.read(ctx, req.Name); err != nil {
				return nil, time.Time{}, err
			}
		}
	}
}

// pollDelay is the wait before the next read of a held lock: uniform in
// [interval/2, interval], but no later than when the watched version
// expires.
func (b *backend) pollDelay(st state) time.Duration {
	d := b.pollInterval(st.obs.lease)
	d = d/2 + rand.N(d/2+1)
	if until := time.Until(st.obs.seen.Add(st.obs.lease)); until < d {
		d = max(until, 0)
	}
	return d
}

// pollInterval is Config.PollInterval, or the default for a lease of the
// given duration.
func (b *backend) pollInterval(lease time.Duration) time.Duration {
	if b.cfg.PollInterval > 0 {
		return b.cfg.PollInterval
	}
	return min(max(lease/20, 10*time.Millisecond), 200*time.Millisecond)
}

// try makes one conditional write and, if it is refused, one read.
func (b *backend) try(ctx context.Context, req driver.AcquireRequest) (driver.Lease, state, error) {
	watched := ""
	if o, ok := b.mem.get(req.Name); ok && o.expired(time.Now()) {
		watched = o.rvn
	}
	l, err := b.write(ctx, req, watched)
	if err == nil || !errors.Is(err, driver.ErrNotAcquired) {
		return l, state{}, err
	}
	st, rerr := b.read(ctx, req.Name)
	if rerr != nil {
		return nil, st, rerr
	}
	if st.free {
		return nil, st, fmt.Errorf("%w (the lock was freed meanwhile)", driver.ErrNotAcquired)
	}
	return nil, st, fmt.Errorf("%w: its record version has been watched unchanged for %v of its %v lease duration",
		driver.ErrNotAcquired, time.Since(st.obs.seen).Round(time.Millisecond), st.obs.lease)
}

// write is the acquire: one conditional UpdateItem.
func (b *backend) write(ctx context.Context, req driver.AcquireRequest, watched string) (driver.Lease, error) {
	owner := b.cfg.Owner + "/" + req.Token
	rvn := newRVN()
	cond := "attribute_not_exists(#k) OR #ir = :rel"
	vals := map[string]types.AttributeValue{
		":on":    str(owner),
		":rvn":   str(rvn),
		":ld":    str(leaseMillis(req.TTL)),
		":rel":   str(releasedValue),
		":floor": num(uint64(time.Now().UnixMicro())),
		":one":   num(1),
	}
	if watched != "" {
		cond += " OR #rvn = :w"
		vals[":w"] = str(watched)
	}
	cctx, c := track(ctx)
	out, err := b.api.UpdateItem(cctx, &ddb.UpdateItemInput{
		TableName:                 &b.cfg.Table,
		Key:                       keyOf(req.Name),
		ConditionExpression:       &cond,
		UpdateExpression:          aws.String("SET #on = :on, #rvn = :rvn, #ld = :ld, #f = if_not_exists(#f, :floor) + :one REMOVE #ir"),
		ExpressionAttributeNames:  names("#k", "#on", "#rvn", "#ld", "#ir", "#f"),
		ExpressionAttributeValues: vals,
		ReturnValues:              types.ReturnValueUpdatedNew,
	}, withAttempts)
	if err == nil {
		b.mem.forget(req.Name)
		fence, ferr := fenceFrom(out.Attributes)
		if ferr != nil {
			l := b.newLease(req, owner, rvn, 0)
			_ = l.Release(context.WithoutCancel(ctx))
			return nil, ferr
		}
		return b.newLease(req, owner, rvn, fence), nil
	}
	if conditionFailed(err) {
		if c.attempts > 1 {
			// An earlier attempt may have been applied, its reply lost,
			// and the retry refused because of it: look.
			return b.recover(ctx, req, owner, rvn, watched, err)
		}
		return nil, driver.ErrNotAcquired
	}
	cause := classify(ctx, "acquire", b.cfg.Table, err)
	if !c.sent {
		return nil, cause
	}
	return nil, b.cleanup(ctx, req, owner, rvn, watched, cause)
}

// recover settles a refused retry: if the item holds our version, an
// earlier attempt was granted and the lease is ours.
func (b *backend) recover(ctx context.Context, req driver.AcquireRequest, owner, rvn, watched string, refused error) (driver.Lease, error) {
	out, err := b.get(ctx, req.Name)
	if err != nil {
		cause := fmt.Errorf("%w (after a retried write was refused: %v)", classify(ctx, "acquire", b.cfg.Table, err), refused)
		return nil, b.cleanup(ctx, req, owner, rvn, watched, cause)
	}
	if out.Item != nil {
		if it, perr := parseItem(req.Name, out.Item); perr == nil && it.rvn == rvn && it.owner == owner && !it.released && it.fence > 0 {
			return b.newLease(req, owner, rvn, it.fence), nil
		}
	}
	return nil, driver.ErrNotAcquired
}

// cleanup runs after an acquire write of unknown outcome, on a context
// detached from ctx: one conditional write marks the item released (with
// a new version) if it holds our version, or, for a takeover, still holds
// the version we watched (so the write, if it arrives late, finds its
// condition gone). It returns cause, wrapped with ErrIndeterminate if the
// cleanup could not be made.
func (b *backend) cleanup(ctx context.Context, req driver.AcquireRequest, owner, rvn, watched string, cause error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(req.TTL, cleanupTimeout))
	defer cancel()
	cond := "#rvn = :rvn AND #on = :on"
	vals := map[string]types.AttributeValue{":rvn": str(rvn), ":on": str(owner), ":rel": str(releasedValue), ":new": str(newRVN())}
	if watched != "" {
		cond = "(" + cond + ") OR #rvn = :w"
		vals[":w"] = str(watched)
	}
	_, err := b.api.UpdateItem(cctx, &ddb.UpdateItemInput{
		TableName:                 &b.cfg.Table,
		Key:                       keyOf(req.Name),
		ConditionExpression:       &cond,
		UpdateExpression:          aws.String("SET #ir = :rel, #rvn = :new"),
		ExpressionAttributeNames:  names("#on", "#rvn", "#ir"),
		ExpressionAttributeValues: vals,
	})
	if err != nil && !conditionFailed(err) {
		return fmt.Errorf("%w: %w; the lock may stay held under this attempt's version until others have watched it unchanged for its %v lease (releasing it failed: %v)",
			driver.ErrIndeterminate, cause, req.TTL, err)
	}
	return cause
}

// read makes one consistent read of the lock's item and updates the
// observation memory.
func (b *backend) read(ctx context.Context, key string) (state, error) {
	out, err := b.get(ctx, key)
	if err != nil {
		return state{}, classify(ctx, "read", b.cfg.Table, err)
	}
	t := time.Now()
	if out.Item == nil {
		b.mem.forget(key)
		return state{free: true}, nil
	}
	it, err := parseItem(key, out.Item)
	if err != nil {
		return state{}, err
	}
	if it.released {
		b.mem.forget(key)
		return state{free: true}, nil
	}
	return state{obs: b.mem.saw(key, it.rvn, it.lease, t)}, nil
}

func (b *backend) get(ctx context.Context, key string) (*ddb.GetItemOutput, error) {
	return b.api.GetItem(ctx, &ddb.GetItemInput{
		TableName:                &b.cfg.Table,
		Key:                      keyOf(key),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#k, #on, #rvn, #ld, #ir, #f"),
		ExpressionAttributeNames: names("#k", "#on", "#rvn", "#ld", "#ir", "#f"),
	})
}

// As sets *target to the DynamoDB client for target types *API and
// **ddb.Client (when the client is one).
func (b *backend) As(target any) bool {
	switch t := target.(type) {
	case *API:
		*t = b.api
		return true
	case **ddb.Client:
		c, ok := b.api.(*ddb.Client)
		if ok {
			*t = c
		}
		return ok
	}
	return false
}

// Close closes the HTTP connections of a client the backend opened (from a
// URL); a client passed to New is left to its owner.
func (b *backend) Close() error {
	if b.closeFn != nil {
		b.closeFn()
	}
	return nil
}

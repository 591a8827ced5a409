package dynamodb

// Operations (internals; the package doc in doc.go has what users need).
//
//   - Acquire: ONE conditional UpdateItem: SET ownerName, a new
//     recordVersionNumber, leaseDuration, fence = if_not_exists(fence,
//     <client clock in µs>) + 1, REMOVE isReleased, on the condition
//     attribute_not_exists(key) OR isReleased = "1" AND <waitQueue absent
//     or empty> [OR recordVersionNumber = <the version this Client
//     watched unchanged for its lease duration> AND <waitQueue absent or
//     empty>]: the lock is free and nobody
//     waits (the first waiter in line conditions on waitQueue[0] = <its
//     entry> instead, and the write removes that entry). ReturnValues
//     gives the new fence. A refused write is followed by one consistent GetItem that
//     records what holds the lock and who waits (the observation: see Expiry by observation, atop observe.go).
//     The write is sent on a settled context (see settled): it outlives
//     the caller's ctx by up to cleanupTimeout, so that a caller who
//     gives up knows whether it was granted.
//   - Acquire, fast path: a Client whose own release wrote the item's
//     last version knows the item (queue aside): its acquire is
//     conditional on recordVersionNumber = <that version> AND
//     size(waitQueue) = 0 and sets ownerName, a new version, fence =
//     <the released fence + 1> (a plain value) and leaseDuration and
//     the label only if they change, returning nothing. dynalite parses
//     that in a fraction of the general write's time (the uncontended
//     acquire+release went from 1.21–1.36× the AWS Lock Client
//     protocol's Put+Delete to 1.10–1.15×, BenchmarkAcquireRelease, and
//     dynalite's CPU per acquire+release from 1,117 to 910 µs against
//     the protocol's 890, BenchmarkRequestCost). What remains (issue 27,
//     BenchmarkAcquireReleaseBlocks: blocks of 100 pairs as benchpeers
//     times them, order rotated): the same two requests and write units
//     as the protocol's PutItem+DeleteItem (one each, the item under
//     1 KB); dynalite's CPU per pair the same as for these two request
//     shapes sent raw on a bare SDK client, 3-16% above Put+Delete's;
//     this process's the same as for the raw shapes (fencelock's own
//     code is lost in the noise), 10-14% above Put+Delete's (the SDK
//     serializing UpdateItems). On a loaded 2-core machine the wall
//     ratio follows the CPU ratio: 0.91-1.11 in those blocks, 1.04-1.24
//     pair by pair (BenchmarkAcquireRelease).
//     If
//     anyone else wrote the item since, the write is refused and the
//     read that follows decides, as for any refusal (a write more when
//     the lock is free after all). The general write leaves an empty
//     waitQueue on an item that had none, which the fast path needs.
//   - Heartbeat (Extend): one UpdateItem conditional on our version and
//     ownerName, writing a new version and leaseDuration.
//   - Release: one UpdateItem conditional on our version and ownerName,
//     setting isReleased = "1" and a new version; or, when the lease saw
//     a waiter first in line, writing that waiter's ownership (the
//     hand-off: see Waiting, atop queue.go). A condition failure is
//     ErrLeaseLost: another holder's lock is never touched.
//
// Acquire and release are one conditional write each (a test counts the
// requests), and so is a hand-off, which grants and releases at once. The waiters' writes (Waiting, atop queue.go) touch waitQueue alone: they
// never change ownerName, recordVersionNumber, isReleased or fence, so
// they neither disturb the holder's conditions nor restart anyone's
// observation of it.
//
// Fences (internals; the package doc in doc.go has what users need).
//
// The fence is the item's numeric fence attribute, raised by one in the
// same conditional write that grants, so two grants of one name can never
// share a fence, and every grant's fence is above the one before it while
// the attribute survives. With fencelock alone on the table it always
// does (DynamoDB is durable and fencelock never deletes the item), so
// Capabilities.Fence is FenceStrict.
//
// Mixed fleets: the AWS Lock Client with its defaults replaces the whole
// item when it acquires (PutItem) and deletes it when it releases, which
// wipes fence. The next fencelock grant then finds no fence and starts
// from the granting client's clock in microseconds (about 1.8e15; fences
// fit an int64 and are exact as JSON numbers). That is above every
// earlier fence as long as that client's clock is not behind the clock of
// the client that issued the last one by more than the time between the
// two grants (a foreign hold lasts at least a round trip, usually
// seconds; NTP keeps clocks within milliseconds). Declare such a fleet
// with Config.MixedFleet (mixed_fleet=true): Capabilities.Fence is then
// FenceTimeFloored.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/localq"
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
	// PollInterval is the longest wait between two reads of a blocked
	// Acquire. Waiters read sooner while the lock changes hands or they
	// move up in its queue (a quarter of the time since, from 3ms, times
	// their place in line from the third on), jittered down to half; a
	// lock handed to the first in line is seen by it within one such wait
	// plus a read, a released one taken within one such wait plus a read
	// and a write, an expired one (its version unchanged for its lease
	// duration) at the first read after. Default: the held item's lease
	// duration / 20, between 10ms and 200ms.
	PollInterval time.Duration
	// MixedFleet declares that clients other than fencelock (the AWS Lock
	// Client with its defaults) use the table: they replace or delete items,
	// which wipes the fence counter, so fences are only time-floored
	// (Capabilities.Fence is FenceTimeFloored instead of FenceStrict). It
	// changes the declaration, not the protocol. Default: false.
	MixedFleet bool
}

// minTTL is the shortest lease TTL the backend accepts. Expiry is decided
// by the waiters' own observation, so the lease must span several round
// trips and polls.
const minTTL = 100 * time.Millisecond

// cleanupTimeout bounds the write TryAcquire makes, on a detached context,
// to release what an attempt of unknown outcome may have taken, and how
// long a write that may grant or enqueue (settled) outlives its caller's
// ctx.
const cleanupTimeout = 2 * time.Second

// settled returns a context for one write that may grant the lock or
// queue the caller (an acquire write, a join): it carries ctx's values
// but not its end, and ends cleanupTimeout after ctx does (or when
// cancel is called). A caller whose ctx ends while such a write is on
// its way thus waits for its outcome (a round trip, as a rule) instead of
// leaving it unknown: a write abandoned on the client is still applied
// by the server, possibly after the caller's next requests (the leave's
// read, the cleanup's conditional write), which then miss it, and the
// entry or grant it makes waits out its lapse time or lease. Callers
// check ctx before they send.
func settled(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(cleanupTimeout, cancel)
		context.AfterFunc(sctx, func() { t.Stop() })
	})
	return sctx, func() {
		stop()
		cancel()
	}
}

// New returns a Client that keeps its locks as items of cfg.Table through
// client (a *ddb.Client). The table must exist (see CreateTable). opts may
// be nil; cfg may not, as Table has no default. New does no I/O; a nil
// client or cfg, a table name DynamoDB would refuse or a negative
// PollInterval is an error matching fencelock.ErrInvalid.
//
// The Client does not own client. Give client a per-request timeout (an
// http.Client Timeout): the SDK has none by default, and a TryAcquire or
// Release without a ctx deadline would wait on a hung connection.
func New(client API, cfg *Config, opts *fencelock.Options) (*fencelock.Client, error) {
	var err error
	switch {
	case client == nil:
		err = fmt.Errorf("%w: dynamodb.New with a nil client", fencelock.ErrInvalid)
	case cfg == nil || cfg.Table == "":
		err = fmt.Errorf("%w: dynamodb.New without Config.Table: the table has no default", fencelock.ErrInvalid)
	case !tableName.MatchString(cfg.Table):
		err = fmt.Errorf("%w: dynamodb.New: table name %q: want 3 to 255 of a-z A-Z 0-9 _ . -", fencelock.ErrInvalid, cfg.Table)
	case cfg.PollInterval < 0:
		err = fmt.Errorf("%w: dynamodb.New: negative Config.PollInterval %v", fencelock.ErrInvalid, cfg.PollInterval)
	}
	if err != nil {
		return nil, &fencelock.Error{Op: "open", Backend: "dynamodb", Err: err}
	}
	return fencelock.New(newBackend(client, *cfg, nil), opts), nil
}

// backend is the DynamoDB driver. It implements driver.Backend,
// driver.Blocker, driver.Admin and driver.Aser.
type backend struct {
	api     API // raw behind a pacer: every request goes through it (pace.go)
	raw     API // as given (As)
	cfg     Config
	caps    driver.Capabilities
	mem     memory
	line    localq.Queues[struct{}] // this Client's blocked Acquires per name, in order (see Acquire)
	cut     atomic.Int64            // KillSessions epoch
	closeFn func()                  // closes what the backend owns (URL-opened clients)
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
	b := &backend{api: &paced{api: api, p: newPacer()}, raw: api, cfg: cfg, closeFn: closeFn}
	b.caps = driver.Capabilities{
		Backend:        "dynamodb",
		Fence:          driver.FenceStrict,
		FenceSource:    "numeric attribute fence of the lock item, incremented (if_not_exists(fence, client clock µs) + 1) in the conditional UpdateItem that grants; the item is never deleted by fencelock",
		MinTTL:         minTTL,
		TTLGranularity: time.Millisecond,
		TimeAuthority:  driver.TimeClient,
		Wait:           driver.WaitPoll,
		FIFO:           false,
		NodeLoss:       driver.NodeLossQuorum,
		// A consistent GetItem: the label and fence attributes, the
		// waitQueue; held means not released and not watched unchanged
		// for its lease duration by this Client, whose observation gives
		// the remaining time (an upper bound: counted from this Client's
		// first read of the holder's current version).
		Inspect: driver.InspectCaps{
			Supported: true, Label: true, Fence: true, Remaining: true, Waiters: true, Relabel: true,
			LabelWhere: "attribute fencelockLabel of the lock item (an additional attribute to the AWS Lock Client, which drops it when it writes the item)",
		},
	}
	// A waiter reads the item at most a poll interval apart: a released
	// lock is taken within one interval plus a read and a write; an
	// expired one once the waiter has watched its version unchanged for
	// the lease duration, which it began to watch within an interval of
	// the holder's last heartbeat.
	poll := b.pollInterval(time.Duration(math.MaxInt64)) // the longest, whatever the lease
	b.caps.ReleaseWake = poll + 100*time.Millisecond
	b.caps.ExpiryWake = 2*poll + 100*time.Millisecond
	if cfg.MixedFleet {
		b.caps.Fence = driver.FenceTimeFloored
		b.caps.FenceSource += "; mixed fleet: AWS Lock Client writers replace or delete the item, and the next fence restarts from the client clock in µs"
	}
	return b
}

func (b *backend) Capabilities() driver.Capabilities { return b.caps }

// state is what a read found: the lock is free (no item, or released), or
// held under the observation in force; and its wait queue.
type state struct {
	free   bool
	owner  string       // ownerName ("" when there is no item)
	fence  driver.Fence // the item's fence
	obs    observation
	queue  []string // waitQueue entries, first in line first
	noQ    bool     // the item exists without a waitQueue attribute
	lapsed int      // index of the first entry this Client has watched unchanged for its lapse time, or -1
}

// lockTakeable reports whether the lock itself is free to take at now: no
// holder, or one whose version this Client watched for a whole lease.
func (s state) lockTakeable(now time.Time) bool { return s.free || s.obs.expired(now) }

// takeable reports whether a write that is not from the first waiter in
// line may take the lock at now: the lock is takeable and nobody waits.
func (s state) takeable(now time.Time) bool { return s.lockTakeable(now) && len(s.queue) == 0 }

// TryAcquire makes one conditional write: take the lock if it has no item,
// or is released, or is held under a version this Client has watched
// unchanged for its whole lease duration, and nobody waits in its queue.
// If the write is refused, one consistent read records what holds the
// lock and who waits (for a later attempt). If the read finds an entry of
// the queue lapsed (watched unchanged for its lapse time by this Client),
// one write drops it; if the lock is then free or expired with nobody in
// line (a fast-path write, made after this Client's own release, is
// refused when anyone else wrote the item since), one more write takes it.
func (b *backend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	l, st, err := b.try(ctx, req, "")
	if !errors.Is(err, driver.ErrNotAcquired) {
		return l, err
	}
	if st.lapsed >= 0 {
		var derr error
		if st, derr = b.dropEntry(ctx, req.Name, st.lapsed, st.queue[st.lapsed]); derr != nil {
			return nil, derr
		}
	}
	if st.takeable(time.Now()) {
		l, _, err = b.try(ctx, req, "")
	}
	return l, err
}

// owner is the ownerName of req's grant.
func (b *backend) owner(req driver.AcquireRequest) string { return b.cfg.Owner + "/" + req.Token }

// pollInterval is Config.PollInterval, or the default for a lease of the
// given duration.
func (b *backend) pollInterval(lease time.Duration) time.Duration {
	if b.cfg.PollInterval > 0 {
		return b.cfg.PollInterval
	}
	return min(max(lease/20, 10*time.Millisecond), 200*time.Millisecond)
}

// try makes one conditional write and, if it is refused, one read. head
// is the caller's entry when it is first in the wait queue, else "".
func (b *backend) try(ctx context.Context, req driver.AcquireRequest, head string) (driver.Lease, state, error) {
	watched := ""
	if o, ok := b.mem.get(req.Name); ok && o.expired(time.Now()) {
		watched = o.rvn
	}
	l, err := b.write(ctx, req, watched, head)
	if err == nil || !errors.Is(err, driver.ErrNotAcquired) {
		return l, state{lapsed: -1}, err
	}
	st, rerr := b.read(ctx, req.Name)
	if rerr != nil {
		return nil, st, rerr
	}
	switch {
	case st.lockTakeable(time.Now()) && len(st.queue) > 0:
		return nil, st, fmt.Errorf("%w: %d blocked Acquires wait in its queue first", driver.ErrNotAcquired, len(st.queue))
	case st.free:
		return nil, st, fmt.Errorf("%w (the lock was freed meanwhile)", driver.ErrNotAcquired)
	}
	return nil, st, fmt.Errorf("%w: its record version has been watched unchanged for %v of its %v lease duration",
		driver.ErrNotAcquired, time.Since(st.obs.seen).Round(time.Millisecond), st.obs.lease)
}

// write is the acquire: one conditional UpdateItem. With head "" it
// requires an empty wait queue; else it requires head first in the queue
// and removes it. On the fast path (this Client released the lock last:
// see Operations, atop this file) its refusal means only that the item
// changed since: the caller's read tells whether to write again.
func (b *backend) write(ctx context.Context, req driver.AcquireRequest, watched, head string) (driver.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, classify(ctx, "acquire", b.cfg.Table, context.Cause(ctx))
	}
	var mine *released
	if m, ok := b.mem.takeReleased(req.Name); ok && head == "" && watched == "" {
		mine = &m
	}
	owner := b.owner(req)
	rvn := newRVN()
	e := acquireExpr(req, owner, rvn, mine)
	e.condition(mine, watched, head)
	expr := e.set + e.remove
	sctx, done := settled(ctx)
	defer done()
	cctx, c := track(sctx)
	out, err := b.api.UpdateItem(cctx, &ddb.UpdateItemInput{
		TableName:                 &b.cfg.Table,
		Key:                       keyOf(req.Name),
		ConditionExpression:       &e.cond,
		UpdateExpression:          &expr,
		ExpressionAttributeNames:  e.n,
		ExpressionAttributeValues: e.vals,
		ReturnValues:              e.returnValues(head),
	}, withAttempts)
	if err == nil {
		return b.written(ctx, req, owner, rvn, head, e.known, out.Attributes)
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

// acquireWrite is an acquire write's expressions, built by acquireExpr
// and condition.
type acquireWrite struct {
	set, remove, cond string
	n                 map[string]string
	vals              map[string]types.AttributeValue
	known             driver.Fence // the fence the write sets, when known before it
}

// acquireExpr starts the acquire write: the owner, the new version, and
// the lease duration and label, unless the fast path (mine != nil) finds
// them already in the item.
func acquireExpr(req driver.AcquireRequest, owner, rvn string, mine *released) *acquireWrite {
	e := &acquireWrite{
		set:    "SET #on = :on, #rvn = :rvn, ",
		remove: " REMOVE #ir",
		n:      names("#on", "#rvn", "#ir", "#f", "#q"),
		vals:   map[string]types.AttributeValue{":on": str(owner), ":rvn": str(rvn)},
	}
	if mine == nil || leaseMillis(mine.ttl) != leaseMillis(req.TTL) {
		e.set += "#ld = :ld, "
		e.vals[":ld"] = str(leaseMillis(req.TTL))
		e.n["#ld"] = attrLease
	}
	switch {
	case mine != nil && mine.label == req.Label:
	case req.Label != "":
		e.set += "#lb = :lb, "
		e.vals[":lb"] = str(req.Label)
		e.n["#lb"] = attrLabel
	default:
		e.remove += ", #lb"
		e.n["#lb"] = attrLabel
	}
	return e
}

// condition adds the write's condition and fence.
func (e *acquireWrite) condition(mine *released, watched, head string) {
	if mine != nil {
		// The fast path: if this Client's own release is the item's last
		// version, the item is as it left it, queue aside, and its fence,
		// lease duration and label are known: two plain comparisons,
		// plain values, only what changes, nothing returned.
		e.known = mine.fence + 1
		e.cond = "#rvn = :w AND size(#q) = :zero"
		e.set += "#f = :f"
		e.vals[":w"], e.vals[":zero"], e.vals[":f"] = str(mine.rvn), num(0), num(uint64(e.known))
		return
	}
	e.set += "#f = if_not_exists(#f, :floor) + :one"
	e.vals[":rel"] = str(releasedValue)
	e.vals[":floor"] = num(uint64(time.Now().UnixMicro()))
	e.vals[":one"] = num(1)
	// (released [OR watched]) AND nobody waits / head first in line,
	// written without parentheses (dynalite parses those slowly) as a
	// disjunction of conjunctions: an item that does not exist has no
	// queue; nobody waits when waitQueue is absent or empty ("size = 0"
	// costs dynalite less than a nested path, attribute_not_exists(#q[0])).
	// The write leaves an empty waitQueue on an item that had none,
	// so that the next grant from this Client's release may take the
	// fast path.
	e.cond = "attribute_not_exists(#k) OR #ir = :rel AND attribute_not_exists(#q) OR #ir = :rel AND size(#q) = :zero"
	if head != "" {
		e.cond = "#ir = :rel AND #q[0] = :head"
		e.remove += ", #q[0]"
		e.vals[":head"] = str(head)
	} else {
		e.set += ", #q = if_not_exists(#q, :empty)"
		e.vals[":zero"] = num(0)
		e.vals[":empty"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{}}
		e.n["#k"] = attrKey
	}
	if watched != "" {
		if head != "" {
			e.cond += " OR #rvn = :w AND #q[0] = :head"
		} else {
			e.cond += " OR #rvn = :w AND attribute_not_exists(#q) OR #rvn = :w AND size(#q) = :zero"
		}
		e.vals[":w"] = str(watched)
	}
}

// returnValues is what the write returns: nothing on the fast path (the
// fence is known), the whole item when taking as head of the line (the
// queue behind us is whom our release hands the lock to: see Hand-off,
// atop queue.go), else the updated fence.
func (e *acquireWrite) returnValues(head string) types.ReturnValue {
	switch {
	case e.known != 0:
		return types.ReturnValueNone
	case head != "":
		return types.ReturnValueAllNew
	}
	return types.ReturnValueUpdatedNew
}

// written makes the lease of a granted acquire write from what it
// returned.
func (b *backend) written(ctx context.Context, req driver.AcquireRequest, owner, rvn, head string, known driver.Fence, attrs map[string]types.AttributeValue) (driver.Lease, error) {
	b.mem.forget(req.Name)
	if known != 0 {
		return b.newLease(req, owner, rvn, known), nil
	}
	fence, ferr := fenceFrom(attrs)
	if ferr != nil {
		l := b.newLease(req, owner, rvn, 0)
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, ferr
	}
	l := b.newLease(req, owner, rvn, fence)
	if head != "" {
		if it, err := parseItem(req.Name, attrs); err == nil {
			l.queue = it.queue
		}
	}
	return l, nil
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
		return state{lapsed: -1}, classify(ctx, "read", b.cfg.Table, err)
	}
	return b.observe(key, out.Item, time.Now())
}

// observe records what an item received at t (nil: no item) shows, and
// returns it as a state.
func (b *backend) observe(key string, item map[string]types.AttributeValue, t time.Time) (state, error) {
	st := state{free: true, lapsed: -1}
	if item == nil {
		b.mem.saw(key, "", 0, nil, t)
		return st, nil
	}
	it, err := parseItem(key, item)
	if err != nil {
		return state{lapsed: -1}, err
	}
	rvn := it.rvn
	if it.released {
		rvn = ""
	}
	obs, seen := b.mem.saw(key, rvn, it.lease, it.queue, t)
	st = state{free: it.released, owner: it.owner, fence: it.fence, obs: obs, queue: it.queue, noQ: !it.hasQueue, lapsed: -1}
	for i, e := range it.queue {
		if t.Sub(seen[i]) >= parseEntry(e).lapse {
			st.lapsed = i
			break
		}
	}
	return st, nil
}

// get is one consistent GetItem of the whole item. Consistent: an
// eventually consistent read (half a read unit on DynamoDB) may return a
// version older than one this Client already saw, and a waiter could miss
// the hand-off that made it the holder for as long as the replica lags.
// No ProjectionExpression: DynamoDB charges a read by the item's size
// whatever it returns, and dynalite parses a projection on every read
// (about 150 µs of its CPU, a third of the read's; the polls of a
// contended lock are most of its requests). The item holds only
// fencelock's attributes, or the AWS Lock Client's (whose data attribute,
// if any, comes along unused).
func (b *backend) get(ctx context.Context, key string) (*ddb.GetItemOutput, error) {
	return b.api.GetItem(ctx, &ddb.GetItemInput{
		TableName:      &b.cfg.Table,
		Key:            keyOf(key),
		ConsistentRead: aws.Bool(true),
	})
}

// As sets *target to the DynamoDB client for target types *API and
// **ddb.Client (when the client is one).
func (b *backend) As(target any) bool {
	switch t := target.(type) {
	case *API:
		*t = b.raw
		return true
	case **ddb.Client:
		c, ok := b.raw.(*ddb.Client)
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

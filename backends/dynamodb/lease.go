package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock/driver"
)

// maxPending bounds the record versions a lease keeps as possibly current
// after writes of unknown outcome.
const maxPending = 8

// lease is a granted lock: the item holds owner and one of rvns.
type lease struct {
	b     *backend
	key   string
	owner string
	fence driver.Fence
	epoch int64 // backend.cut when granted (KillSessions)

	mu    sync.Mutex
	rvns  []string      // the item's version, plus versions written by writes of unknown outcome
	ttl   time.Duration // lease duration last written
	label string        // label last written ("" for none)
	queue []string      // the wait queue as last seen (at the grant): whom Release hands off to
}

var (
	_ driver.Lease        = (*lease)(nil)
	_ driver.GrantedTTLer = (*lease)(nil)
)

func (b *backend) newLease(req driver.AcquireRequest, owner, rvn string, fence driver.Fence) *lease {
	return &lease{b: b, key: req.Name, owner: owner, fence: fence, epoch: b.cut.Load(), rvns: []string{rvn}, ttl: req.TTL, label: req.Label}
}

func (l *lease) Fence() driver.Fence { return l.fence }

// GrantedTTL is how long another client may have to wait for this lock
// once it is abandoned: a waiter takes it after watching its version
// unchanged for the lease duration from its own first read, plus up to one
// poll interval and the round trips of its read and write (counted here
// as a second poll interval).
func (l *lease) GrantedTTL() time.Duration {
	l.mu.Lock()
	ttl := l.ttl
	l.mu.Unlock()
	p := l.b.pollInterval(ttl)
	return ttl + 2*p
}

// Extend is the heartbeat: one UpdateItem, conditional on our version and
// owner, writes a new version and the lease duration.
func (l *lease) Extend(ctx context.Context, ttl time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.update(ctx, "extend", "SET #rvn = :new, #ld = :ld", map[string]types.AttributeValue{":ld": str(leaseMillis(ttl))}, ttl)
}

// Release hands the lock to the first waiter in line, if the queue as
// last seen has one that takes hand-offs (see Hand-off, atop queue.go);
// else it marks the item released and writes a new version. Either write
// is conditional on our version and owner. The item (and its fence)
// stays.
func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.cut.Load() == l.epoch {
		for range maxHandOffs {
			if len(l.queue) == 0 || parseEntry(l.queue[0]).lease == "" {
				break
			}
			if err := l.handOff(ctx); !errors.Is(err, errHeadMoved) {
				return err
			}
		}
	}
	err := l.update(ctx, "release", "SET #ir = :rel, #rvn = :new", map[string]types.AttributeValue{":rel": str(releasedValue)}, 0)
	if err == nil {
		l.b.mem.released(l.key, released{rvn: l.rvns[0], fence: l.fence, ttl: l.ttl, label: l.label})
	}
	return err
}

// maxHandOffs bounds the hand-off writes of one Release (each refusal
// means the first entry of the queue changed); then it releases.
const maxHandOffs = 4

// errHeadMoved is a refused hand-off of a lock still ours: the first
// entry of the queue is another now (l.queue has it).
var errHeadMoved = errors.New("the first waiter in line changed")

// handOff writes the first waiter's ownership (its ownerName and lease
// duration from its entry, a new version, the fence + 1) and removes its
// entry, conditional on our version and owner and that entry still being
// first (see Hand-off, atop queue.go). A refusal reads the item: if the
// lock is still ours, l.queue becomes its queue and the result is
// errHeadMoved. Callers hold mu.
func (l *lease) handOff(ctx context.Context) error {
	head := l.queue[0]
	e := parseEntry(head)
	rvn := newRVN()
	vals := map[string]types.AttributeValue{
		":new": str(rvn), ":on": str(l.owner), ":won": str(e.owner), ":wld": str(e.lease),
		":f": num(uint64(l.fence) + 1), ":head": str(head),
	}
	cond := l.versionCond(vals) + " AND #q[0] = :head"
	expr := "SET #on = :won, #rvn = :new, #ld = :wld, #f = :f REMOVE #q[0], #lb"
	if e.label != "" {
		expr = "SET #on = :won, #rvn = :new, #ld = :wld, #f = :f, #lb = :wlb REMOVE #q[0]"
		vals[":wlb"] = str(e.label)
	}
	c, err := l.write(ctx, cond, expr, names("#rvn", "#on", "#ld", "#f", "#q", "#lb"), vals)
	if err == nil {
		l.handedOff(rvn, e, l.queue[1:])
		return nil
	}
	if !conditionFailed(err) {
		return classify(ctx, "release", l.b.cfg.Table, err)
	}
	out, gerr := l.b.get(ctx, l.key)
	if gerr != nil {
		return classify(ctx, "release", l.b.cfg.Table, gerr)
	}
	if out.Item == nil {
		return l.lost()
	}
	it, perr := parseItem(l.key, out.Item)
	switch {
	case perr != nil:
		return l.lost()
	case c.attempts > 1 && it.rvn == rvn:
		// An earlier attempt was applied, its reply lost.
		l.handedOff(rvn, e, it.queue)
		return nil
	case it.owner == l.owner && !it.released && slices.Contains(l.rvns, it.rvn):
		l.rvns = append(l.rvns[:0], it.rvn)
		l.queue = it.queue
		return errHeadMoved
	}
	return l.lost()
}

// handedOff records a hand-off to e that wrote version rvn and left queue
// behind: this Client has seen the lock held under rvn (its next Acquire
// of the name joins the queue at once). Callers hold mu.
func (l *lease) handedOff(rvn string, e entry, queue []string) {
	l.queue = nil
	ld, _ := parseLease(e.lease)
	l.b.mem.handedOff(l.key, rvn, ld, queue, time.Now())
}

// versionCond is the condition that the item holds our version (one of
// the versions it may hold) and owner, with their values added to vals.
func (l *lease) versionCond(vals map[string]types.AttributeValue) string {
	vals[":on"] = str(l.owner)
	var in []string
	for i, v := range l.rvns {
		p := fmt.Sprintf(":r%d", i)
		vals[p] = str(v)
		in = append(in, p)
	}
	cond := "#rvn = " + in[0]
	if len(in) > 1 {
		cond = "#rvn IN (" + strings.Join(in, ", ") + ")"
	}
	return cond + " AND #on = :on"
}

// write makes one conditional UpdateItem on the lock's item, tracking its
// attempts.
func (l *lease) write(ctx context.Context, cond, expr string, n map[string]string, vals map[string]types.AttributeValue) (*call, error) {
	cctx, c := track(ctx)
	_, err := l.b.api.UpdateItem(cctx, &ddb.UpdateItemInput{
		TableName:                 &l.b.cfg.Table,
		Key:                       keyOf(l.key),
		ConditionExpression:       aws.String(cond),
		UpdateExpression:          aws.String(expr),
		ExpressionAttributeNames:  n,
		ExpressionAttributeValues: vals,
	}, withAttempts)
	return c, err
}

// update makes one owner-checked write that rotates the version. Callers
// hold mu.
func (l *lease) update(ctx context.Context, op, expr string, vals map[string]types.AttributeValue, ttl time.Duration) error {
	if l.b.cut.Load() != l.epoch {
		return fmt.Errorf("%w: dynamodb %s: this client was cut off from DynamoDB by KillSessions (a simulated network partition)", driver.ErrUnavailable, op)
	}
	rvn := newRVN()
	vals[":new"] = str(rvn)
	cond := l.versionCond(vals)
	n := names("#rvn", "#on")
	for _, k := range []string{"#ld", "#ir", "#lb"} {
		if strings.Contains(expr, k) {
			n[k] = exprNames[k]
		}
	}
	c, err := l.write(ctx, cond, expr, n, vals)
	switch {
	case err == nil:
		l.done(rvn, ttl)
		return nil
	case conditionFailed(err) && c.attempts > 1:
		// A retry refused because an earlier attempt was applied?
		out, gerr := l.b.get(ctx, l.key)
		if gerr != nil {
			// Unknown: the item may hold rvn. Not lost until a read says so.
			l.pending(rvn)
			return classify(ctx, op, l.b.cfg.Table, gerr)
		}
		if out.Item != nil {
			if it, perr := parseItem(l.key, out.Item); perr == nil && it.rvn == rvn && it.owner == l.owner {
				l.done(rvn, ttl)
				return nil
			}
		}
		return l.lost()
	case conditionFailed(err):
		return l.lost()
	}
	if c.sent {
		l.pending(rvn)
	}
	return classify(ctx, op, l.b.cfg.Table, err)
}

// pending records rvn, written by a write of unknown outcome, as a
// version the item may hold. Callers hold mu.
func (l *lease) pending(rvn string) {
	l.rvns = append(l.rvns, rvn)
	if len(l.rvns) > maxPending {
		l.rvns = l.rvns[len(l.rvns)-maxPending:]
	}
}

// done records a successful write of rvn.
func (l *lease) done(rvn string, ttl time.Duration) {
	l.rvns = append(l.rvns[:0], rvn)
	if ttl > 0 {
		l.ttl = ttl
	}
}

func (l *lease) lost() error {
	return fmt.Errorf("%w: the DynamoDB item no longer holds this lease's record version (released, or taken over after its version went unchanged for a lease duration)", driver.ErrLeaseLost)
}

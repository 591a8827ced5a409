package etcd

// TTLs and leases (internals; the package doc in doc.go has what users need).
//
// A Client keeps one etcd lease per TTL class (the TTL rounded up to whole
// seconds, TTLGranularity 1s), like concurrency.Session, and attaches the
// key of every lock it queues or holds with that TTL to it: granted at the
// first acquisition with that TTL, revoked by Close. etcd itself raises a
// TTL below 1.5 × its election timeout, rounded up: 2 s with etcd's
// default 1 s election timeout (a stock server), 1 s with an election
// timeout up to 666 ms. Open by URL therefore asks the cluster
// (ProbeMinTTL: grant a 1 s lease, read the granted TTL, revoke it) and
// sets Capabilities().MinTTL to the answer, so shorter TTLs are rejected
// with ErrInvalid rather than silently raised; New uses Config.MinTTL
// (default 1 s). Every Grant and KeepAlive response carries the TTL etcd
// granted; the lease reports it (driver.GrantedTTLer, hence
// Lease.StoreTTL), and the client side still ends the lease at the TTL it
// asked for, which is safe.
//
// Acquire is one Txn (create our key on the class lease, read the queue),
// as Mutex.Lock is. The portable layer counts a lease's validity from when
// the request that started its TTL was sent, so the class lease's TTL
// must restart after the acquisition began, or the driver must report
// when it did restart. The portable Client's TryAcquire and Acquire do the
// latter (driver.TimedTryAcquirer, driver.Blocker): they report the send
// time of the class lease's last refresh, and refresh it first only if
// that is older than TTL/6 (in the background, not waited for, once it is
// older than TTL/12), so a grant is one Txn, as Mutex's is, and its
// validity may be up to TTL/6 shorter than the TTL. The bare driver's
// TryAcquire, which cannot report it, sends a keepalive of the class
// lease alongside its Txn (shared with the class's other acquisitions and
// renewals of that moment). A keepalive is one message on the
// Client's one LeaseKeepAlive stream, not a new gRPC stream.
//
// Renewal (Lease.Extend and auto-renew) joins the class's next
// keepalive: never one already sent (its send time would precede the
// renewal, and validity counts from it), but the one not sent yet, shared
// by every renewal of the class that asks before it goes out. The class
// sends at most one such keepalive at a time, and at most one per
// refreshGap (TTL/200, within 5 to 25 ms), so a Client holding any number
// of leases of one TTL sends at most 40 to 200 keepalives per second for
// them, and a renewal waits at most refreshGap longer. A keepalive proves
// only that the class lease lives, not that our key is still on it (it
// may have been deleted and the lock granted to another client), and the
// shared loss watch (Waiting and loss, atop watch.go) may lag, so neither is trusted: with each
// keepalive that renewals joined goes one linearizable read of their keys
// (a read-only Txn of up to 128 keys-only Gets, served without a raft
// write), sent right after the keepalive so that the two overlap. A
// renewal counts only if that read found its key with its CreateRevision
// on the class lease; if the key is gone or another's, Extend reports
// ErrLeaseLost, whatever the watch has delivered. Renewals thus cost the
// cluster as many cheap reads as keepalives, not one per lease, and a
// renewal's latency is the slower of the two.
// etcd cannot change a lease's TTL, so Extend with a TTL of another whole
// number of seconds moves our key to that TTL's class lease (a Txn Put,
// only if the key's CreateRevision is still ours, that keeps the
// CreateRevision, hence the fence and the place in the queue).
//
// The class lease is kept alive only by those renewals and by waiting
// acquires, never by a loop of its own. A lock that is not renewed thus
// still ends in the store after its TTL: if no other lock renews the
// class lease, it expires; if one does, the Client deletes the unrenewed
// key itself once its TTL (as granted) has passed since its last renewal
// (a timer per lease, no goroutine), after the portable deadline. If the
// Client dies, the class lease expires and every key on it goes. A class
// lease that is gone (revoked, expired: a keepalive or a Put finds "lease
// not found") ends every lease on it at once, and the next acquisition
// grants a new one.
//
// Release deletes our key with a plain DeleteRange, as Mutex.Unlock
// does: no other key ever has its name while we hold it (the class
// lease's ID and a number the Client gives one contender at a time, taken
// back only after this delete), so it cannot delete another holder's
// key, and its PrevKv tells whether the key was still ours (if not, the
// lease was lost). An acquire+release is thus two raft writes, the
// minimum for a queue of keys, and a held lease costs no goroutine and no
// RPC of its own.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

// TTL classes. A backend keeps one etcd lease per TTL (in whole seconds),
// like concurrency.Session: every lock key it queues or holds with that
// TTL is attached to the class's lease. Granting and revoking leases are
// raft writes, restarting a lease's TTL is not, so an acquire is one Txn
// and a renewal is one keepalive (keepalive.go) shared by every lease of
// the class that asks for one at about the same time (see refresh).
//
// The class lease is kept alive only on demand: by renewals (Extend, the
// portable auto-renew) and waiting acquires, never by a loop of its own,
// so a lock that is not renewed still ends in the store: by the class
// lease's expiry if nothing renews the class, else by its own reaper (see
// lease.reap), which deletes its key once its TTL has passed unrenewed.
//
// When the class lease is gone (revoked, expired: a keepalive or a Put
// says "lease not found") every lock on it is lost at once, and the next
// acquire grants a new class lease.

// errClassGone: the class lease no longer exists in etcd.
var errClassGone = errors.New("etcd: the TTL class lease expired or was revoked")

// refreshGap is the least time between two keepalives of one class that
// renewals (not acquires) wait for: at most 1/refreshGap keepalives per
// second and class, however many leases it carries, for at most
// refreshGap of added renewal latency.
func refreshGap(ttl int64) time.Duration {
	return min(max(time.Duration(ttl)*time.Second/200, 5*time.Millisecond), 25*time.Millisecond)
}

// class is the etcd lease of one TTL.
type class struct {
	b     *backend
	ttl   int64         // seconds, requested
	gap   time.Duration // refreshGap(ttl)
	ready chan struct{} // closed when the grant is done (id or err set)
	err   error         // the grant's error
	id    clientv3.LeaseID
	hex   string // id in lowercase hex, as lock key names carry it

	mu         sync.Mutex
	granted    int64       // seconds, as the server granted the last grant or keepalive (≥ ttl)
	lastSent   time.Time   // send time of the last successful grant or keepalive
	lastTry    time.Time   // send time of the last keepalive, successful or not
	dead       atomic.Bool // the lease is gone: every member was lost (read without mu)
	members    map[*lease]struct{}
	pending    *refreshReq // not sent yet: callers may join it
	inflight   bool        // a paced (non-urgent) keepalive is in flight
	timerArmed bool
	timer      *time.Timer
}

// refreshReq is one keepalive shared by the callers that joined it
// before it was sent.
type refreshReq struct {
	done    chan struct{}
	urgent  bool
	spawned bool     // its sender is started: it leaves c.pending when it sends
	check   []*lease // renewals that joined: their keys are read with it (check.go)
	sent    time.Time
	granted int64
	err     error      // the keepalive's
	states  []keyState // what the read found of each key of check
	readErr error      // the read's
}

// classFor returns the live class of ttl seconds, granting its lease if
// there is none. Concurrent callers share one grant.
func (b *backend) classFor(ctx context.Context, ttl int64) (*class, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, driver.ErrClosed
	}
	c := b.classes[ttl]
	grant := c == nil || c.isDead()
	if grant {
		c = &class{b: b, ttl: ttl, gap: refreshGap(ttl), ready: make(chan struct{}), members: map[*lease]struct{}{}}
		b.classes[ttl] = c
		b.ops.Add(1)
	}
	b.mu.Unlock()
	if grant {
		// On a context of the backend's, so that a caller giving up does
		// not fail the others waiting for the same grant.
		go func() {
			defer b.ops.Done()
			rctx, cancel := context.WithTimeout(b.ctx, b.timeout)
			defer cancel()
			sent := time.Now()
			g, err := b.cli.Grant(rctx, ttl)
			if err != nil {
				c.err = err
				c.mu.Lock()
				c.dead.Store(true)
				c.mu.Unlock()
				b.mu.Lock()
				if b.classes[ttl] == c {
					delete(b.classes, ttl)
				}
				b.mu.Unlock()
			} else {
				c.id, c.hex = g.ID, strconv.FormatInt(int64(g.ID), 16)
				c.mu.Lock()
				c.granted, c.lastSent, c.lastTry = max(g.TTL, ttl), sent, sent
				c.mu.Unlock()
			}
			close(c.ready)
		}()
	}
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil, b.fail(ctx, "grant lease", ctx.Err())
	}
	if c.err != nil {
		return nil, b.fail(ctx, "grant lease", c.err)
	}
	return c, nil
}

func (c *class) isDead() bool {
	select {
	case <-c.ready:
	default:
		return false // being granted
	}
	return c.dead.Load()
}

// state returns the send time of the last request that restarted the
// class lease's TTL, and the TTL granted.
func (c *class) state() (lastSent time.Time, granted int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastSent, c.granted
}

// add makes l a member: it is lost when the class is. It reports false
// (and adds nothing) if the class is gone already.
func (c *class) add(l *lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead.Load() {
		return false
	}
	c.members[l] = struct{}{}
	return true
}

func (c *class) remove(l *lease) {
	c.mu.Lock()
	delete(c.members, l)
	c.mu.Unlock()
}

// kill records that the class lease is gone: every member is lost, and
// the next acquire with this TTL grants a new class lease.
func (c *class) kill() {
	c.mu.Lock()
	if c.dead.Load() {
		c.mu.Unlock()
		return
	}
	c.dead.Store(true)
	ms := c.members
	c.members = nil
	r := c.pending
	c.pending = nil
	if r != nil && r.spawned {
		r = nil // its sender answers it
	}
	c.mu.Unlock()
	b := c.b
	b.mu.Lock()
	if b.classes[c.ttl] == c {
		delete(b.classes, c.ttl)
	}
	b.mu.Unlock()
	if r != nil {
		r.err = errClassGone
		close(r.done)
	}
	for l := range ms {
		l.markLost()
	}
}

// refresh restarts the class lease's TTL with a keepalive sent after
// refresh was called, and returns that request's send time and the TTL
// granted. Callers share requests: one joins the request not sent yet, if
// any, never one already sent (its send time would precede the call).
// urgent requests (acquires) are sent at once; others (renewals) at most
// once per c.gap, one at a time. errClassGone if the lease is gone.
func (c *class) refresh(ctx context.Context, urgent bool) (time.Time, int64, error) {
	r, err := c.join(urgent)
	if err != nil {
		return time.Time{}, 0, err
	}
	return r.wait(ctx)
}

// renew is refresh for a renewal of l, a member: it also returns what the
// linearizable read sent with the keepalive found of l's key (see
// check.go), or that read's error. Only keyOurs with no error proves the
// renewal; keyGone (with no error) proves the loss, whatever the
// keepalive's answer.
func (c *class) renew(ctx context.Context, l *lease) (time.Time, int64, keyState, error) {
	r, i, err := c.joinCheck(false, l)
	if err != nil {
		return time.Time{}, 0, 0, err
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return time.Time{}, 0, 0, ctx.Err()
	}
	if r.readErr == nil && r.states != nil && r.states[i] == keyGone {
		return time.Time{}, 0, keyGone, nil // whatever the keepalive says
	}
	err = r.err
	if err == nil {
		err = r.readErr
	}
	if err != nil {
		return time.Time{}, 0, 0, err
	}
	return r.sent, r.granted, r.states[i], nil
}

// join joins (or makes) the request not sent yet, without waiting for it.
func (c *class) join(urgent bool) (*refreshReq, error) {
	r, _, err := c.joinCheck(urgent, nil)
	return r, err
}

// joinCheck is join that also has l's key (if l is not nil) read with the
// request, as r.check[i].
func (c *class) joinCheck(urgent bool, l *lease) (r *refreshReq, i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead.Load() {
		return nil, 0, errClassGone
	}
	r = c.pending
	if r == nil {
		r = &refreshReq{done: make(chan struct{})}
		c.pending = r
	}
	r.urgent = r.urgent || urgent
	if l != nil {
		i = len(r.check)
		r.check = append(r.check, l)
	}
	c.scheduleLocked()
	return r, i, nil
}

// wait waits for r's answer: its send time and the TTL granted.
func (r *refreshReq) wait(ctx context.Context) (time.Time, int64, error) {
	select {
	case <-r.done:
		return r.sent, r.granted, r.err
	case <-ctx.Done():
		return time.Time{}, 0, ctx.Err()
	}
}

// scheduleLocked sends c.pending now or arranges for it to be sent.
// c.mu is held.
func (c *class) scheduleLocked() {
	r := c.pending
	if r == nil || r.spawned {
		return
	}
	switch {
	case r.urgent:
		// Sent at once; callers may still join until the sender takes it.
		r.spawned = true
		c.goSend(r, false)
	case c.inflight || c.timerArmed:
		// The keepalive in flight, or the timer, sends it.
	default:
		if wait := c.gap - time.Since(c.lastTry); wait > 0 {
			c.timerArmed = true
			if c.timer == nil {
				c.timer = time.AfterFunc(wait, c.fire)
			} else {
				c.timer.Reset(wait)
			}
			return
		}
		r.spawned = true
		c.inflight = true
		c.goSend(r, true)
	}
}

func (c *class) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timerArmed = false
	c.scheduleLocked()
}

// goSend sends r on a goroutine of its own (Close waits for it).
func (c *class) goSend(r *refreshReq, paced bool) {
	b := c.b
	b.mu.Lock()
	closed := b.closed
	if !closed {
		b.ops.Add(1)
	}
	b.mu.Unlock()
	if closed {
		if paced {
			c.inflight = false
		}
		if c.pending == r {
			c.pending = nil
		}
		r.err = driver.ErrClosed
		close(r.done)
		return
	}
	go func() {
		defer b.ops.Done()
		c.send(r, paced)
	}()
}

func (c *class) send(r *refreshReq, paced bool) {
	b := c.b
	rctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	c.mu.Lock()
	if c.pending == r {
		c.pending = nil // no one joins it from now on
	}
	c.mu.Unlock()
	// r.check is final: no one joins r any more. The keepalive goes
	// first; the read of the renewals' keys overlaps with it.
	sent := time.Now()
	ka := b.kaSend(c.id)
	if len(r.check) > 0 {
		r.states, r.readErr = b.checkKeys(rctx, c.id, r.check)
	}
	kaTTL, err := b.kaWait(rctx, ka)
	cancel()
	gone := err != nil && isLeaseNotFound(err)
	c.mu.Lock()
	if sent.After(c.lastTry) {
		c.lastTry = sent
	}
	if err == nil {
		if sent.After(c.lastSent) {
			c.lastSent = sent
		}
		c.granted = max(kaTTL, c.ttl)
	}
	if paced {
		c.inflight = false
		if !c.dead.Load() {
			c.scheduleLocked()
		}
	}
	c.mu.Unlock()
	switch {
	case gone:
		r.err = errClassGone
	case err != nil:
		r.err = err
	default:
		r.sent, r.granted = sent, max(kaTTL, c.ttl)
	}
	close(r.done)
	if gone {
		c.kill()
	}
}

// revokeAll revokes every class lease (which deletes every key on them)
// and forgets the classes; Close and KillSessions call it.
func (b *backend) revokeAll(ctx context.Context) error {
	b.mu.Lock()
	cs := make([]*class, 0, len(b.classes))
	for _, c := range b.classes {
		cs = append(cs, c)
	}
	b.mu.Unlock()
	var first error
	for _, c := range cs {
		<-c.ready
		if c.err != nil {
			continue
		}
		err := b.unreachable(ctx, func(ctx context.Context) error {
			rctx, cancel := context.WithTimeout(ctx, b.timeout)
			defer cancel()
			_, err := b.cli.Revoke(rctx, c.id)
			return err
		})
		if errors.Is(err, driver.ErrUnavailable) {
			return err // no endpoint accepts connections: the rest would wait in vain
		}
		if err != nil && !isLeaseNotFound(err) {
			if first == nil {
				first = err
			}
			continue
		}
		c.kill()
	}
	return first
}

package zookeeper

// Fences (internals; the package doc in doc.go has what users need).
//
// The fence is a zxid (ZooKeeper transaction ID, global to the ensemble):
// the pzxid of the lock path P (the zxid of the last create or delete of
// a child of P) in the Children read that found our node first. That read
// is the one the recipe needs anyway, so the fence costs no request of its
// own. It is at least our node's czxid (our node is a child of P in that
// read) and equals it when no other child of P was created or deleted
// since ours.
//
// It strictly grows with every grant on P (FenceStrict), across releases,
// session expiry, client crashes, server restarts and leader elections:
// ZooKeeper applies transactions in zxid order, and a read shows a prefix
// of that history. Let grant G1 read state S1 (its node N1 present and
// first) and another grant G2 read a later state S2 (N2 present and
// first; S1 and S2 differ, as one state has one first node). N1 is gone
// from S2: if it were still there, N2 would be ahead of it, so created
// before it under the same incarnation of P (sequence numbers grow with
// creation, and P cannot be deleted while N1 is in it), and then present
// and ahead of N1 in S1 already. So N1's delete (release, TTL, session
// expiry or an admin) lies between S1 and S2, and
//
//	fence(G1) = pzxid(S1) <= last zxid of S1 < zxid of N1's delete <= pzxid(S2) = fence(G2)
//
// because a child's delete sets the parent's pzxid to the delete's zxid
// and pzxid never decreases while P exists. If P (a container) is
// deleted once empty and created again, its new pzxid starts at its own
// creation zxid, above every earlier one. Stale reads (a follower behind
// the leader) order fences by the history the reads saw, which is the
// order in which ZooKeeper granted the locks. The per-parent sequence
// number is not used as a fence: it restarts when the container parent is
// made again.
//
// A read that decides about another client's write (Extend: is our node
// still there? Inspect, and the admin's Expire: who holds now?) is sent
// after a sync on the same session, so a follower that lags the leader
// answers it only once it has caught up: such a read sees every write
// committed before it was sent, as on a single server.
//
// Requests (internals; the package doc in doc.go has what users need).
//
// An uncontended acquire is two requests in one round trip: the create of
// our node and the Children read of P, sent as soon as the create is
// written, without waiting for its answer (ZooKeeper serves a session's
// requests in order, so the read sees our node; a read that does not is
// made again). Release is one delete. That is go-zookeeper's zk.Lock's
// create, Children and delete, with the fence in the read's answer.
//
// Waiting (internals; the package doc in doc.go has what users need).
//
// Acquire is a driver.Blocker: our node stays queued while we wait (FIFO),
// we watch only the node just ahead of ours (no herd), and re-read the
// queue after every event, with a poll every 2s as a fallback. A cancelled
// wait deletes our node, also when the cancel races the grant.

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// errRequeue: our node vanished while we waited (session expired, node
// deleted); queue again.
var errRequeue = errors.New("zookeeper: our lock node vanished while waiting")

// pollInterval bounds a wait for a watch event: a fallback re-check in
// case an event is lost.
const pollInterval = 2 * time.Second

// TryAcquire queues our node and leaves at once (deleting it) unless it is
// first: the recipe's "try lock".
func (b *backend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	if err := b.begin(); err != nil {
		return nil, err
	}
	defer b.ops.Done()
	s, err := b.sessionFor(ctx, req.TTL)
	if err != nil {
		return nil, err
	}
	parent, prefix := lockPath(b.root, req.Name), nodePrefix(req.Token)
	p, sid, first, err := b.enqueue(ctx, s, parent, prefix, []byte(req.Label))
	if err != nil {
		return nil, err
	}
	var lk look
	if first != nil {
		lk = *first
	} else {
		lk, err = b.check(ctx, s, parent, prefix, p, sid)
	}
	if err == nil && ctx.Err() != nil {
		err = b.fail(ctx, "try-acquire", ctx.Err())
	}
	if err == nil && lk.q.ours == "" {
		err = fmt.Errorf("%w: zookeeper: our node %s vanished at once", driver.ErrUnavailable, p)
	}
	if err == nil && lk.q.pred != "" {
		err = fmt.Errorf("%w: %s is held by %s", driver.ErrNotAcquired, parent, lk.q.lowest)
	}
	if err != nil {
		b.leave(ctx, s, p)
		return nil, err
	}
	return b.newLease(s, p, sid, lk.fence, req.TTL, lk.sent), nil
}

// Acquire queues our node and waits for its turn, watching only the
// contender just ahead of it.
func (b *backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	if err := b.begin(); err != nil {
		return nil, time.Time{}, err
	}
	defer b.ops.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel) // Close ends waits
	defer stop()
	s, err := b.sessionFor(ctx, req.TTL)
	if err != nil {
		return nil, time.Time{}, err
	}
	parent, prefix := lockPath(b.root, req.Name), nodePrefix(req.Token)
	for {
		_, _, wake := s.state()
		p, sid, first, err := b.enqueue(ctx, s, parent, prefix, []byte(req.Label))
		if err != nil {
			return nil, time.Time{}, err
		}
		fence, sent, err := b.waitTurn(ctx, s, parent, prefix, p, sid, first, wake)
		if errors.Is(err, errRequeue) {
			continue
		}
		if err == nil && ctx.Err() != nil {
			err = b.fail(ctx, "acquire", ctx.Err()) // granted as the wait was cancelled
		}
		if err != nil {
			b.leave(ctx, s, p)
			return nil, time.Time{}, err
		}
		return b.newLease(s, p, sid, fence, req.TTL, sent), sent, nil
	}
}

// waitTurn waits until our node p, created in session sid, is first. It
// returns the fence (see check) and the send time of the read that found
// it first. first, if not nil, is a read made already, and wake the
// session's wake channel from before it.
func (b *backend) waitTurn(ctx context.Context, s *session, parent, prefix, p string, sid int64, first *look, wake <-chan struct{}) (int64, time.Time, error) {
	var failingSince time.Time // zero while the ensemble answers
	for {
		var lk look
		var err error
		if first != nil {
			lk, first = *first, nil
		} else {
			_, _, wake = s.state()
			lk, err = b.check(ctx, s, parent, prefix, p, sid)
		}
		q := lk.q
		if err != nil {
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if ctx.Err() == nil && errors.Is(err, driver.ErrUnavailable) && time.Since(failingSince) < b.timeout {
				// A lost connection or an election: the session (and our
				// place in the queue) may well survive it. Try again
				// shortly, for up to the request timeout.
				if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
					return 0, time.Time{}, b.fail(ctx, "wait", err)
				}
				continue
			}
			return 0, time.Time{}, err
		}
		failingSince = time.Time{}
		if q.ours == "" {
			return 0, time.Time{}, errRequeue
		}
		if q.pred == "" {
			return lk.fence, lk.sent, nil
		}
		type exw struct {
			ok bool
			ch <-chan zk.Event
		}
		w, err := call(b, ctx, func() (exw, error) {
			ok, _, ch, err := s.conn.ExistsW(parent + "/" + q.pred)
			return exw{ok, ch}, err
		})
		if err != nil {
			if ctx.Err() != nil {
				return 0, time.Time{}, b.fail(ctx, "wait", ctx.Err())
			}
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return 0, time.Time{}, b.fail(ctx, "wait", err)
			}
			continue
		}
		if !w.ok {
			continue // gone already: check again
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-w.ch:
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, time.Time{}, b.fail(ctx, "wait", ctx.Err())
		}
		t.Stop()
	}
}

// look is one read of the queue: our node counts as present (q.ours) only
// if it is the node we created, in session sid (see examine). fence is the
// lock path's pzxid in that read: when our node is first, it is our
// lease's fence (see Fences, atop this file). sent is when the read was sent.
type look struct {
	q     queue
	fence int64
	sent  time.Time
}

// check reads the queue under parent with one Children read (see look).
func (b *backend) check(ctx context.Context, s *session, parent, prefix, p string, sid int64) (look, error) {
	type kids struct {
		names []string
		pzxid int64
	}
	sent := time.Now()
	r, err := call(b, ctx, func() (kids, error) {
		c, st, err := s.conn.Children(parent)
		if err != nil {
			return kids{}, err
		}
		return kids{c, st.Pzxid}, nil
	})
	if errors.Is(err, zk.ErrNoNode) {
		return look{sent: sent}, nil
	}
	if err != nil {
		return look{sent: sent}, b.fail(ctx, "read lock queue", err)
	}
	return b.examine(s, parent, p, sid, scan(r.names, prefix), r.pzxid, sent), nil
}

// examine turns the queue q read under parent into a look for our node p,
// created while the session was sid: p counts only if it is in q and the
// session is still sid (so p is an ephemeral node of session sid: session
// IDs never come back). Twins of ours (a create retried after a
// connection loss) are deleted in the background.
func (b *backend) examine(s *session, parent, p string, sid int64, q queue, pzxid int64, sent time.Time) look {
	for _, x := range q.extra { // a create retried after a connection loss
		b.deleteLater(s, parent+"/"+x)
	}
	if q.ours != path.Base(p) {
		// Our node is not the one we created: it vanished (and this is
		// an older or newer twin, or nothing).
		if q.ours != "" {
			b.deleteLater(s, parent+"/"+q.ours)
		}
		return look{sent: sent}
	}
	if id, _, _ := s.state(); id != sid || sid == 0 {
		// The session changed since the create: our node may belong to
		// a session that is gone (it goes with it) or to the new one.
		b.deleteLater(s, p)
		return look{sent: sent}
	}
	return look{q: q, fence: pzxid, sent: sent}
}

// enqueue creates our contender node (createNode) and reads the queue
// pipelined with the create: the read is sent as soon as the create
// request is written, without waiting for its answer. ZooKeeper serves a
// session's requests in order, so that read sees our node and the create
// and the read cost one round trip. first is that read, or nil if it does
// not show the node we created (the create was retried, went out on
// another connection, or the read failed or came late): the caller then
// reads again.
func (b *backend) enqueue(ctx context.Context, s *session, parent, prefix string, data []byte) (p string, sid int64, first *look, err error) {
	key := parent + "/" + prefix
	wrote := s.expectCreate(key)
	if wrote == nil { // one awaited already (cannot happen: a token per attempt)
		p, sid, err = b.createNode(ctx, s, parent, prefix, data)
		return p, sid, nil, err
	}
	type early struct {
		names []string
		pzxid int64
		sent  time.Time
		err   error
	}
	got := make(chan early, 1)
	stop := make(chan struct{})
	b.ops.Add(1) // within this operation's: Close waits for it too
	go func() {
		defer b.ops.Done()
		select {
		case <-wrote:
		case <-stop:
			return
		}
		e := early{sent: time.Now()}
		var st *zk.Stat
		if e.names, st, e.err = s.conn.Children(parent); e.err == nil {
			e.pzxid = st.Pzxid
		}
		got <- e
	}()
	p, sid, err = b.createNode(ctx, s, parent, prefix, data)
	s.unexpect(key, wrote)
	select {
	case <-wrote:
	default:
		close(stop) // no create of ours was written
		return p, sid, nil, err
	}
	if err != nil {
		return p, sid, nil, err
	}
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	var e early
	select {
	case e = <-got:
	case <-ctx.Done():
		return p, sid, nil, nil // the caller's read reports it
	case <-t.C:
		return p, sid, nil, nil
	}
	if e.err != nil {
		return p, sid, nil, nil
	}
	q := scan(e.names, prefix)
	if q.ours != path.Base(p) {
		return p, sid, nil, nil // sent before the create that made p
	}
	lk := b.examine(s, parent, p, sid, q, e.pzxid, e.sent)
	return p, sid, &lk, nil
}

// createNode creates our contender node under parent, creating missing
// parents as containers. After a connection loss it looks for our node by
// its protected prefix instead of creating a second one; a create whose
// outcome stays unknown is cleaned up in the background.
func (b *backend) createNode(ctx context.Context, s *session, parent, prefix string, data []byte) (string, int64, error) {
	// The create is not cut short by ctx: its outcome is waited for (up to
	// the request timeout), so that a node created as ctx ends is known and
	// deleted by the caller before it returns.
	dctx := context.WithoutCancel(ctx)
	for attempt := 0; ; attempt++ {
		// The session our node will belong to, if the create is sent
		// while it lasts (examine checks that it still does).
		sid := s.currentID(ctx)
		p, err := callLate(b, dctx, func() (string, error) {
			return s.conn.Create(parent+"/"+prefix, data, zk.FlagEphemeralSequential, b.acl)
		}, func(p string, err error) {
			// The caller gave up: whatever got created must go.
			if err == nil {
				b.deleteLater(s, p)
			} else if uncertain(err) {
				b.sweepLater(s, parent, prefix)
			}
		})
		switch {
		case err == nil:
			return p, sid, nil
		case errors.Is(err, zk.ErrNoNode) && attempt < 5:
			if err := b.makeParents(ctx, s, parent); err != nil && !(errors.Is(err, driver.ErrUnavailable) && ctx.Err() == nil && attempt < 4) {
				return "", 0, err
			}
			continue
		case connLost(err) && ctx.Err() == nil && attempt < 5:
			// The create may have been applied: find our node (Curator's
			// protected mode) once the session is reconnected, or create
			// it if it is not there.
			q, ferr := b.findOurs(ctx, s, parent, prefix)
			if ferr != nil {
				b.sweepLater(s, parent, prefix)
				return "", 0, b.fail(ctx, "create lock node", err)
			}
			if q.ours != "" {
				return parent + "/" + q.ours, sid, nil
			}
			continue
		case errors.Is(err, zk.ErrSessionExpired) && ctx.Err() == nil && attempt < 5:
			continue // our node went with the session; a new session follows
		}
		// The request timeout ended the call: callLate's late handler
		// cleans up.
		return "", 0, b.fail(ctx, "create lock node", err)
	}
}

// findOurs reads the queue under parent (a missing parent is an empty
// queue), retrying while the connection is being re-established, within
// the request timeout.
func (b *backend) findOurs(ctx context.Context, s *session, parent, prefix string) (queue, error) {
	deadline := time.Now().Add(b.timeout)
	for {
		children, err := call(b, ctx, func() ([]string, error) {
			c, _, err := s.conn.Children(parent)
			return c, err
		})
		switch {
		case err == nil:
			return scan(children, prefix), nil
		case errors.Is(err, zk.ErrNoNode):
			return queue{}, nil
		case !unavailable(err) || ctx.Err() != nil || time.Now().After(deadline):
			return queue{}, err
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return queue{}, err
		}
	}
}

// makeParents creates parent, and the missing ones of its ancestors, as
// container nodes (ZooKeeper deletes an empty container), or persistent
// nodes on a server without containers.
func (b *backend) makeParents(ctx context.Context, s *session, parent string) error {
	if parent == "/" {
		return nil
	}
	err := b.makeNode(ctx, s, parent)
	if errors.Is(err, zk.ErrNoNode) {
		if err := b.makeParents(ctx, s, path.Dir(parent)); err != nil {
			return err
		}
		err = b.makeNode(ctx, s, parent)
	}
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return b.fail(ctx, "create parent "+parent, err)
	}
	return nil
}

func (b *backend) makeNode(ctx context.Context, s *session, p string) error {
	_, err := call(b, ctx, func() (string, error) {
		return s.conn.CreateContainer(p, nil, zk.FlagContainer, b.acl)
	})
	if errors.Is(err, zk.ErrUnknown) || errors.Is(err, zk.ErrAPIError) || errors.Is(err, zk.ErrBadArguments) {
		_, err = call(b, ctx, func() (string, error) { return s.conn.Create(p, nil, zk.FlagPersistent, b.acl) })
	}
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// leave deletes our node after a failed or abandoned attempt, on a context
// detached from ctx; if that fails it keeps trying in the background.
func (b *backend) leave(ctx context.Context, s *session, p string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	if err := b.delete(dctx, s, p); err != nil && !errors.Is(err, zk.ErrNoNode) {
		b.deleteLater(s, p)
	}
}

// delete deletes node p (any version). A delete whose outcome is unknown
// (connection lost) is sent again, and then a missing node counts as
// deleted.
func (b *backend) delete(ctx context.Context, s *session, p string) error {
	del := func() (struct{}, error) { return struct{}{}, s.conn.Delete(p, -1) }
	_, err := call(b, ctx, del)
	if err != nil && connLost(err) && ctx.Err() == nil {
		if _, err = call(b, ctx, del); errors.Is(err, zk.ErrNoNode) {
			return nil
		}
	}
	return err
}

// deleteLater deletes node p in the background, retrying until it is gone,
// its session ends (it goes with it), or the backend closes.
func (b *backend) deleteLater(s *session, p string) {
	sid, _, _ := s.state()
	b.background(func(ctx context.Context) bool {
		if id, _, _ := s.state(); id != sid {
			return true
		}
		err := b.delete(ctx, s, p)
		return err == nil || errors.Is(err, zk.ErrNoNode)
	})
}

// sweepLater deletes, in the background, every node under parent named
// with prefix (a create whose outcome is unknown).
func (b *backend) sweepLater(s *session, parent, prefix string) {
	sid, _, _ := s.state()
	tries := 0
	b.background(func(ctx context.Context) bool {
		if id, _, _ := s.state(); id != sid {
			return true
		}
		children, err := call(b, ctx, func() ([]string, error) {
			c, _, err := s.conn.Children(parent)
			return c, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return true
		}
		if err != nil {
			return false
		}
		ok := true
		for _, c := range children {
			if strings.HasPrefix(c, prefix) {
				if err := b.delete(ctx, s, parent+"/"+c); err != nil && !errors.Is(err, zk.ErrNoNode) {
					ok = false
				}
			}
		}
		// A create still in flight may land later: look a few times.
		tries++
		return ok && tries >= 3
	})
}

// background runs f until it reports done, with growing pauses, until the
// backend closes.
func (b *backend) background(f func(ctx context.Context) bool) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.ops.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.ops.Done()
		pause := 50 * time.Millisecond
		for b.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
			done := f(ctx)
			cancel()
			if done || sleepCtx(b.ctx, pause) != nil {
				return
			}
			pause = min(2*pause, 2*time.Second)
		}
	}()
}

// callLate is call with a handler for a result that arrives after the
// caller gave up (ctx or the request timeout).
func callLate[T any](b *backend, ctx context.Context, f func() (T, error), late func(T, error)) (T, error) {
	var (
		mu     sync.Mutex
		gaveUp bool
	)
	ch := make(chan result[T], 1)
	go func() {
		v, err := f()
		mu.Lock()
		g := gaveUp
		if !g {
			ch <- result[T]{v, err}
		}
		mu.Unlock()
		if g {
			late(v, err)
		}
	}()
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	var why error
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		why = ctx.Err()
	case <-t.C:
		why = errTimeout
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-ch:
		return r.v, r.err
	default:
		gaveUp = true
		var zero T
		return zero, why
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

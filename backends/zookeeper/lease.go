package zookeeper

// Disconnects and session expiry (Curator's SUSPENDED and LOST) (internals; the package doc in doc.go has what users need).
//
// Curator tells lock holders SUSPENDED when the connection drops and LOST
// when the session expires, and leaves it to the application to stop
// work at SUSPENDED. Here:
//
//   - Session expiry (LOST) ends every lease of that session at once
//     (Lease.Done, through driver.LossNotifier), as does a new session
//     replacing it.
//   - A disconnect (SUSPENDED) does not end a lease by itself: go-zookeeper
//     reconnects, to another server if need be, and a session that comes
//     back within its timeout keeps its nodes. Meanwhile renewals fail, so
//     a lease whose connection does not come back ends at its local
//     validity deadline (TTL after its last successful renewal was sent,
//     minus the drift margin). That is before the server can expire the
//     session and grant the lock to someone else, because the session
//     timeout is at least the TTL: the same rule as every other backend.
//   - A lease whose TTL is longer than its session's granted timeout (an
//     Extend to a longer TTL, or a TTL above the server's
//     maxSessionTimeout) could outlive its session by its local deadline,
//     so it ends at the first disconnect of its session.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

var (
	_ driver.Lease        = (*lease)(nil)
	_ driver.LossNotifier = (*lease)(nil)
	_ driver.GrantedTTLer = (*lease)(nil)
	_ driver.HoldBounder  = (*lease)(nil)
	_ driver.Aser         = (*lease)(nil)
)

// lease is a held lock: our contender node, first in its queue. The
// portable layer serializes Extend and Release.
type lease struct {
	s     *session
	path  string // our node
	fence int64  // the lock path's pzxid when our node was found first; our node's czxid is at most it
	sid   int64  // the session that owns our node

	mu    sync.Mutex
	ttl   time.Duration
	timer *time.Timer // deletes our node when the TTL passes without a renewal

	releasing  atomic.Bool     // our own delete is coming: not a loss
	lost       context.Context // done when the store dropped the lease
	cancelLost context.CancelFunc
}

func (b *backend) newLease(s *session, path string, sid, fence int64, ttl time.Duration, sent time.Time) *lease {
	l := &lease{s: s, path: path, fence: fence, sid: sid, ttl: ttl}
	l.lost, l.cancelLost = context.WithCancel(context.Background())
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(sent.Add(ttl)), l.expire)
	l.mu.Unlock()
	if !s.add(l) { // the session ended since the node was created
		l.markLost()
	}
	return l
}

func (l *lease) Fence() driver.Fence { return driver.Fence(l.fence) }

// OnLost implements driver.LossNotifier: it calls f when the lease is lost, without a goroutine per lease.
func (l *lease) OnLost(f func()) (stop func() bool) { return context.AfterFunc(l.lost, f) }

// GrantedTTL is how long ZooKeeper may keep the lock of a client that
// vanished: the TTL (our own timer deletes the node then, while this
// process runs) or the negotiated session timeout, whichever is longer.
func (l *lease) GrantedTTL() time.Duration {
	_, negotiated, _ := l.s.state()
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.ttl, negotiated)
}

// HoldBound implements driver.HoldBounder: the negotiated session
// timeout. The server deletes our node one session timeout after it last
// heard from the session, whatever the lease's TTL, so a holder frozen
// (SIGSTOP, a VM pause) right after a renewal of a TTL longer than that
// must not believe past it. 0 (no bound) before the session's first
// connection reported its timeout.
func (l *lease) HoldBound() time.Duration {
	_, negotiated, _ := l.s.state()
	return negotiated
}

// As supports **zk.Conn (the session's connection) and *string (the path
// of our node).
func (l *lease) As(target any) bool {
	switch p := target.(type) {
	case **zk.Conn:
		*p = l.s.conn
	case *string:
		*p = l.path
	default:
		return false
	}
	return true
}

// overlong reports a TTL longer than the session timeout the server
// granted (see the comment atop this file).
func (l *lease) overlong() bool {
	l.mu.Lock()
	ttl := l.ttl
	l.mu.Unlock()
	return ttl > l.s.negotiatedLocked()
}

func (l *lease) markLost() {
	if l.releasing.Load() {
		return
	}
	l.cancelLost()
}

func (l *lease) isLost() bool {
	return l.lost.Err() != nil
}

// Extend confirms, with one read sent now, that the session is alive and
// our node still exists and is ours (owned by our session, and created no
// later than the read that granted it: a node of the same path made later
// has a greater czxid); the server then keeps the session
// (and our node) at least a session timeout past the send time. It moves
// the TTL timer to ttl from the send time.
func (l *lease) Extend(ctx context.Context, ttl time.Duration) error {
	if l.isLost() {
		return fmt.Errorf("%w: zookeeper node %s is gone (session ended or node deleted)", driver.ErrLeaseLost, l.path)
	}
	b := l.s.b
	sent := time.Now()
	type ex struct {
		ok   bool
		stat *zk.Stat
	}
	r, err := call(b, ctx, synced(l.s, l.path, func() (ex, error) {
		ok, st, err := l.s.conn.Exists(l.path)
		return ex{ok, st}, err
	}))
	if errors.Is(err, zk.ErrSessionExpired) {
		l.markLost()
		return fmt.Errorf("%w: zookeeper session %#x expired", driver.ErrLeaseLost, l.sid)
	}
	if err != nil {
		return b.fail(ctx, "check lock node", err)
	}
	id, _, _ := l.s.state()
	if !r.ok || r.stat.EphemeralOwner != l.sid || r.stat.Czxid > l.fence || id != l.sid {
		l.markLost()
		return fmt.Errorf("%w: zookeeper node %s was deleted (session %#x ended or node removed)", driver.ErrLeaseLost, l.path, l.sid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isLost() { // the TTL timer fired meanwhile
		return fmt.Errorf("%w: zookeeper node %s reached its TTL", driver.ErrLeaseLost, l.path)
	}
	l.ttl = ttl
	l.timer.Reset(time.Until(sent.Add(ttl)))
	return nil
}

// expire is the TTL timer: the holder stopped renewing, so its node goes,
// as a server-side TTL would remove it.
func (l *lease) expire() {
	if l.releasing.Load() {
		return
	}
	l.markLost()
	l.s.b.deleteLater(l.s, l.path)
	l.s.remove(l)
}

// Release deletes our node if it still exists; ErrLeaseLost if it was
// gone already.
func (l *lease) Release(ctx context.Context) error {
	l.releasing.Store(true)
	l.mu.Lock()
	stopped := l.timer.Stop()
	l.mu.Unlock()
	defer l.s.remove(l)
	if !stopped && l.isLost() {
		// The TTL timer fired (and deleted the node) or the session ended.
		return fmt.Errorf("%w: zookeeper node %s had reached its TTL or lost its session", driver.ErrLeaseLost, l.path)
	}
	b := l.s.b
	err := b.delete(ctx, l.s, l.path)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("%w: zookeeper node %s was already gone", driver.ErrLeaseLost, l.path)
	}
	// Unknown outcome: keep trying in the background while the session
	// lives (when it ends the node goes with it).
	b.deleteLater(l.s, l.path)
	return b.fail(ctx, "delete lock node", err)
}

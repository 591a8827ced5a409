package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
)

// lane is a Client's express lane: a pub/sub connection of its own that one
// blocked Acquire at a time reads itself. A grant published for it wakes
// the waiting goroutine straight from the network poller. Through the hub
// (waiter.go) the same grant takes two goroutine wake-ups, the hub's
// dispatcher's and then the waiter's; on a contended lock that second one
// is a large part of the hand-off's latency besides the round trips.
// Acquire takes the lane when it is free and uses the hub otherwise, so a
// Client that waits on one lock at a time (8 processes contending for one
// lock, say) never goes through the hub, and one that waits on many still
// uses one hub connection for all but one of its waiters.
//
// The lane subscribes to one lock's release channel and to its own grant
// channel for that lock, <channel>:<id> (an id of its own, unlike the
// hub's), and confirms them with a PING whose reply it reads before its
// first queued attempt, as the hub does. It stays subscribed while unused,
// so that a hot loop of Acquire and Release on one lock subscribes
// nothing, and closes its connection after linger unused. A blocked read
// can only be interrupted by closing the connection: a wait whose ctx ends
// closes it, and the next wait dials again.
type lane struct {
	client goredis.UniversalClient
	id     string // 32 hex digits: grants for the lane's waiter come on <channel>:<id>
	busy   atomic.Bool

	mu        sync.Mutex // guards the fields below
	closed    bool
	ps        *goredis.PubSub // nil: no connection
	channel   string          // the lock channel ps is subscribed to ("": none)
	confirmed bool            // a PING sent after that SUBSCRIBE was answered on this connection
	idle      *time.Timer     // drops the connection after linger unused
	seq       uint64
}

func newLane(client goredis.UniversalClient) *lane {
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails (Go ≥ 1.24)
	return &lane{client: client, id: hex.EncodeToString(id[:])}
}

// take claims the lane for one blocked Acquire; false if another has it
// or the backend closed.
func (l *lane) take() bool {
	if !l.busy.CompareAndSwap(false, true) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.busy.Store(false)
		return false
	}
	if l.idle != nil {
		l.idle.Stop()
	}
	return true
}

// put gives the lane back, keeping its subscription for linger.
func (l *lane) put() {
	l.mu.Lock()
	if !l.closed && l.ps != nil {
		if l.idle == nil {
			l.idle = time.AfterFunc(linger, l.expire)
		} else {
			l.idle.Reset(linger)
		}
	}
	l.mu.Unlock()
	l.busy.Store(false)
}

// expire drops the connection of a lane left unused for linger.
func (l *lane) expire() {
	if !l.busy.CompareAndSwap(false, true) {
		return // in use again: put rearms the timer
	}
	l.mu.Lock()
	l.dropLocked()
	l.mu.Unlock()
	l.busy.Store(false)
}

// hot reports whether the lane's subscription to ch is confirmed: a wait on
// it would send nothing before its first queued attempt.
func (l *lane) hot(ch string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ps != nil && l.confirmed && l.channel == ch
}

// drop closes the lane's connection (a wait's ctx ended while it may be
// reading); the next wait dials again.
func (l *lane) drop() {
	l.mu.Lock()
	l.dropLocked()
	l.mu.Unlock()
}

func (l *lane) dropLocked() {
	if l.ps != nil {
		_ = l.ps.Close()
		l.ps = nil
	}
	l.channel, l.confirmed = "", false
}

// close closes the lane for good (the backend is closing); a wait on it
// returns ErrClosed.
func (l *lane) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.idle != nil {
		l.idle.Stop()
	}
	l.dropLocked()
}

// grantChannel is the channel on which releases hand the lock of channel
// ch to the lane's waiter.
func (l *lane) grantChannel(ch string) string { return ch + ":" + l.id }

// closeOnEnd drops the lane's connection when ctx ends: a blocked read
// ends only when its connection closes. The returned stop waits for a drop
// that started, so that the lane is not given back half dropped.
func (l *lane) closeOnEnd(ctx context.Context) (stop func()) {
	dropped := make(chan struct{})
	s := context.AfterFunc(ctx, func() { l.drop(); close(dropped) })
	return func() {
		if !s() {
			<-dropped
		}
	}
}

// laneWait is a blocked Acquire's waiter on the lane (blocker.go's grants).
type laneWait struct {
	lane  *lane
	k     keys
	token string
}

func (w *laneWait) ready(ctx context.Context) (driver.Fence, error) {
	return w.lane.ready(ctx, w.k, w.token)
}
func (w *laneWait) forget() {} // block holds the lane's grants itself
func (w *laneWait) await(ctx context.Context, d time.Duration) (driver.Fence, error) {
	return w.lane.await(ctx, w.k, w.token, d)
}
func (w *laneWait) id() string { return w.lane.id }

// ended is why a wait on the lane must stop: ctx's error or ErrClosed.
func (l *lane) ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return driver.ErrClosed
	}
	return nil
}

// ready makes sure the lane is subscribed to k's channels on its current
// connection, confirmed by a PING reply, and returns the fence of a grant
// for token read meanwhile (0: none). An error other than ended's means
// the lane cannot serve (the connection cannot be set up): the caller falls
// back to the hub.
func (l *lane) ready(ctx context.Context, k keys, token string) (driver.Fence, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, driver.ErrClosed
	}
	if l.ps == nil {
		l.ps = l.client.Subscribe(context.WithoutCancel(ctx)) // no channels yet: no I/O
	}
	ps, old := l.ps, l.channel
	if old == k.channel && l.confirmed {
		l.mu.Unlock()
		return 0, nil
	}
	l.channel, l.confirmed = k.channel, false
	l.seq++
	ping := "fencelock:lane:" + strconv.FormatUint(l.seq, 36)
	l.mu.Unlock()
	if old != k.channel {
		if old != "" {
			if err := ps.Unsubscribe(ctx, old, l.grantChannel(old)); err != nil {
				return 0, l.fail(ctx, err)
			}
		}
		if err := ps.Subscribe(ctx, k.channel, l.grantChannel(k.channel)); err != nil {
			return 0, l.fail(ctx, err)
		}
	}
	if err := ps.Ping(ctx, ping); err != nil {
		return 0, l.fail(ctx, err)
	}
	var fence driver.Fence
	for {
		msg, err := ps.ReceiveTimeout(ctx, recheck)
		if err != nil {
			if timeout(err) && l.ended(ctx) == nil {
				continue // a slow server: the reply is still to come
			}
			return 0, l.fail(ctx, err)
		}
		switch m := msg.(type) {
		case *goredis.Pong:
			if m.Payload == ping {
				l.mu.Lock()
				l.confirmed = l.ps == ps && l.channel == k.channel
				l.mu.Unlock()
				return fence, nil
			}
		case *goredis.Message:
			if f, _ := l.event(k, token, m); f != 0 {
				fence = f
			}
		}
	}
}

// await reads the lane for up to d. It returns the fence of a grant for
// token, or 0 when a release notice was heard, d passed, or the connection
// broke (a grant may have been lost: the caller attempts again, and the
// attempt answers a grant made to its token). It returns an error only
// when the wait must end (ended).
func (l *lane) await(ctx context.Context, k keys, token string, d time.Duration) (driver.Fence, error) {
	l.mu.Lock()
	ps := l.ps
	l.mu.Unlock()
	if ps == nil {
		if err := l.ended(ctx); err != nil {
			return 0, err
		}
		return 0, nil // dropped: ready dials again
	}
	deadline := time.Now().Add(d)
	for {
		rem := time.Until(deadline)
		if rem <= 0 {
			return 0, nil
		}
		msg, err := ps.ReceiveTimeout(ctx, rem)
		if err != nil {
			if err := l.ended(ctx); err != nil {
				return 0, err
			}
			if !timeout(err) {
				l.mu.Lock()
				l.confirmed = false // confirm again (on a new connection) before the next attempt
				l.mu.Unlock()
			}
			return 0, nil
		}
		if m, ok := msg.(*goredis.Message); ok {
			if f, wake := l.event(k, token, m); wake {
				return f, nil
			}
		}
	}
}

// event interprets a message on the lane: a grant to token (its fence), a
// release notice on k's channel (wake, fence 0), or neither.
func (l *lane) event(k keys, token string, m *goredis.Message) (fence driver.Fence, wake bool) {
	if m.Channel != k.channel && m.Channel != l.grantChannel(k.channel) {
		return 0, false // a channel the lane left
	}
	if t, f, ok := parseGrant(m.Payload); ok {
		if t == token {
			return f, true
		}
		return 0, false // another waiter's (a grant on the lock's channel itself)
	}
	return 0, m.Channel == k.channel && m.Payload == k.lock
}

// fail returns ended's error if the wait must end, else err marking the
// lane unusable; the connection is dropped either way.
func (l *lane) fail(ctx context.Context, err error) error {
	l.drop()
	if e := l.ended(ctx); e != nil {
		return e
	}
	return errLane{err}
}

// errLane is a lane that could not be set up: its Acquire falls back to
// the hub.
type errLane struct{ err error }

func (e errLane) Error() string { return "redis lane: " + e.err.Error() }
func (e errLane) Unwrap() error { return e.err }

// timeout reports a read deadline that passed (not a broken connection).
func timeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Fence is a fencing token. For one lock name, every new lease's fence is
// greater than every earlier lease's (see Capabilities.Fence for how strong
// a backend's promise is). Send it with every write to the protected
// resource, which must refuse a write carrying a fence lower than one it has
// seen (package guard does that). 0 means "no fence". Fences fit in an int64.
//
// It is driver.Fence, the type package driver and package guard use, so a
// fence passes between them with no conversion.
type Fence = driver.Fence

// Lease is a held lock. Its methods are safe for concurrent use.
//
// A lease ends exactly once: by Release (Err is ErrReleased), or by loss
// (Err is ErrLeaseLost): the store said it is gone, a renewal found it gone,
// its local validity deadline passed without a successful renewal, MaxHold
// passed, or the Client was closed. When it ends, Done is closed and Context
// is cancelled with Err as its cause.
type Lease struct {
	c         *Client
	name      string
	dl        driver.Lease
	fence     Fence
	autoRenew bool
	// parent is the context the lease was acquired with: Context carries
	// its values (not its cancellation).
	parent context.Context

	// renewCancel cancels the renewal in flight, if any (guarded by mu);
	// Release uses it so that it never waits out a slow renewal.
	renewCancel context.CancelFunc

	mu sync.Mutex
	// ctx is the lease's context, made on first use (Context, Done, a
	// renewal): a lease acquired and released without either costs no
	// context. cancel cancels it with cause.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// cause is why the lease ended: set by end, once, when ctx (if any) is
	// cancelled with it. Err returns it.
	cause error
	// endWait, made only when someone waits for an end in progress, is
	// closed when cause is set.
	endWait chan struct{}
	// opBusy is the slot serializing store operations (renew, Extend,
	// Release); opFree, made only when someone waits for the slot, is
	// closed when it is freed, so that a caller waiting for an in-flight
	// renewal can give up when its ctx ends.
	opBusy      bool
	opFree      chan struct{}
	ttl         time.Duration
	sent        time.Time // when the granting request was sent
	validUntil  time.Time // monotonic; conservative
	maxHoldAt   time.Time // zero: no cap
	ended       bool
	stopRenew   bool // Release started: no renewal may be sent
	storeGone   bool // the store side is known released or lost
	renewTimer  *time.Timer
	expiryTimer *time.Timer
	unhook      func() bool // unregisters the driver's LossNotifier callback
	// released is the cause of a lease ended by a successful Release,
	// part of the lease so that it costs no allocation of its own. Only
	// the Release that ends the lease writes it, before end.
	released Error
	label    string
}

func newLease(ctx context.Context, c *Client, name string, o resolved, dl driver.Lease, sent time.Time) *Lease {
	l := &Lease{c: c, name: name, dl: dl, fence: dl.Fence(), autoRenew: o.autoRenew, parent: ctx, ttl: o.ttl, sent: sent, label: o.label}
	held := l.held(o.ttl)
	l.validUntil = sent.Add(held - c.drift(held))
	if o.maxHold > 0 {
		l.maxHoldAt = sent.Add(o.maxHold)
		if l.maxHoldAt.Before(l.validUntil) {
			l.validUntil = l.maxHoldAt
		}
	}
	return l
}

// start arms the expiry and renewal timers and the store loss watch.
func (l *Lease) start() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.expiryTimer = time.AfterFunc(time.Until(l.validUntil), l.checkExpiry)
	if l.autoRenew {
		l.renewTimer = time.AfterFunc(time.Until(l.sent.Add(l.held(l.ttl)/3)), l.renew)
	}
	l.mu.Unlock()
	if h, ok := l.dl.(driver.LossNotifier); ok {
		stop := h.OnLost(func() {
			l.markStoreGone()
			l.end(l.lostErr("the store dropped the lease"))
		})
		// Unregister when the lease ends first (in end, synchronously:
		// no goroutine per lease end), so that nothing is kept per ended
		// lease.
		l.mu.Lock()
		ended := l.ended
		if !ended {
			l.unhook = stop
		}
		l.mu.Unlock()
		if ended {
			stop()
		}
	}
}

func (c *Client) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.opts.DriftFactor) + 2*time.Millisecond
}

// Name returns the lock name (without the client's prefix).
func (l *Lease) Name() string { return l.name }

// Fence returns the lease's fencing token.
func (l *Lease) Fence() Fence { return l.fence }

// Done returns a channel closed when the lease ends (released or lost).
func (l *Lease) Done() <-chan struct{} { return l.context().Done() }

// Err returns nil while the lease is held, then why it ended: an error
// wrapping ErrReleased or ErrLeaseLost.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// Context returns a context that is cancelled, with Err as its cause, when
// the lease ends. Pass it to the work done under the lock. It carries the
// values of the context Acquire was called with, not its cancellation.
func (l *Lease) Context() context.Context { return l.context() }

// context returns the lease's context, making it on first use (already
// cancelled with the cause if the lease has ended).
func (l *Lease) context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(l.parent))
		if l.cause != nil {
			l.cancel(l.cause)
		}
	}
	return l.ctx
}

// ValidUntil returns the local deadline until which the lease is certainly
// held: the start of the granting request plus TTL minus a drift margin,
// moved forward only by successful renewals (measured from when each was
// sent), moved earlier as soon as a renewal to a shorter TTL is sent (the
// store may apply it before the reply comes), and capped by MaxHold. When it passes without a renewal the lease
// ends with ErrLeaseLost, before the store can grant the lock to anyone else
// (assuming bounded clock-rate drift). The one exception is declared in
// Capabilities.BreakOverlap: a store that frees a lock when its holder's
// connection breaks (PostgreSQL) may grant it before the holder learns of
// the break, which the holder then does within that bound.
func (l *Lease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// StoreTTL returns how long the store keeps the lock without a renewal,
// counted from the last successful acquire or renewal: the TTL the store
// granted, which some stores raise above the one requested (etcd's minimum
// lease TTL, ZooKeeper's negotiated session timeout). ValidUntil stays
// computed from the requested TTL; StoreTTL is how long another client may
// have to wait for a lock whose holder vanished.
func (l *Lease) StoreTTL() time.Duration {
	l.mu.Lock()
	ttl := l.ttl
	l.mu.Unlock()
	if g, ok := l.dl.(driver.GrantedTTLer); ok {
		if s := g.GrantedTTL(); s > ttl {
			return s
		}
	}
	return ttl
}

// lockOp takes the store-operation token, or returns ctx's error if ctx
// ends first.
// It must not be called with l.mu held.
func (l *Lease) lockOp(ctx context.Context) error {
	l.mu.Lock()
	for l.opBusy {
		if l.opFree == nil {
			l.opFree = make(chan struct{})
		}
		free := l.opFree
		l.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		l.mu.Lock()
	}
	l.opBusy = true
	l.mu.Unlock()
	return nil
}

func (l *Lease) unlockOp() {
	l.mu.Lock()
	l.opBusy = false
	if l.opFree != nil {
		close(l.opFree)
		l.opFree = nil
	}
	l.mu.Unlock()
}

// As sets target to the backend's native view of this lease when it has a
// supported type (see the backend's package doc) and reports whether it did.
func (l *Lease) As(target any) bool {
	if a, ok := l.dl.(driver.Aser); ok && target != nil {
		return a.As(target)
	}
	return false
}

// Extend sets the lease's TTL to ttl (0: keep the current TTL) from now and
// renews it in the store. Later automatic renewals use the new TTL. It
// returns ErrLeaseLost if the lease is gone, ErrReleased after Release, or
// the store's error (the lease then stays held until its deadline: for a
// shorter TTL, the one this call set when it sent the renewal).
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	const op = "extend"
	if ttl != 0 {
		if err := l.c.checkTTL(ttl); err != nil {
			return l.wrap(op, err)
		}
	}
	if ctx == nil {
		return l.wrap(op, fmt.Errorf("%w: nil context", ErrInvalid))
	}
	if err := l.lockOp(ctx); err != nil {
		return l.wrap(op, fmt.Errorf("waiting for a renewal in flight: %w", err))
	}
	defer l.unlockOp()
	l.mu.Lock()
	if ttl == 0 {
		ttl = l.ttl
	}
	if l.ended {
		l.mu.Unlock()
		return l.wrap(op, l.endedErr())
	}
	l.mu.Unlock()
	if err := l.storeExtend(ctx, ttl); err != nil {
		return l.wrap(op, err)
	}
	return nil
}

// renew is the auto-renew timer's callback.
func (l *Lease) renew() {
	lctx := l.context()
	if l.lockOp(lctx) != nil {
		return
	}
	defer l.unlockOp()
	l.mu.Lock()
	if l.ended || l.stopRenew {
		l.mu.Unlock()
		return
	}
	ttl, deadline := l.ttl, l.validUntil
	ctx, cancel := context.WithDeadline(lctx, deadline)
	l.renewCancel = cancel
	l.mu.Unlock()
	err := l.storeExtend(ctx, ttl)
	l.mu.Lock()
	l.renewCancel = nil
	stopped := l.stopRenew || l.ended
	l.mu.Unlock()
	cancel()
	if err == nil || stopped || lctx.Err() != nil {
		return // renewed, or superseded by Release/Close
	}
	l.c.m.add(l.c.m.renewFailures)
	l.c.log.Warn("fencelock: renewal failed; retrying until the validity deadline", "name", l.name, "fence", l.fence, "err", err)
	retry := l.held(ttl) / 10
	if retry < 5*time.Millisecond {
		retry = 5 * time.Millisecond
	}
	l.mu.Lock()
	if !l.ended && !l.stopRenew {
		l.renewTimer.Reset(retry)
	}
	l.mu.Unlock()
}

// storeExtend renews in the store and, on success, moves the deadline and
// schedules the next renewal. Callers hold the op slot (lockOp).
func (l *Lease) storeExtend(ctx context.Context, ttl time.Duration) error {
	sent := time.Now()
	// From the moment the request leaves, the store may keep the lock
	// only until sent+ttl: a shorter TTL moves the deadline earlier now,
	// not at the reply, or a holder stalled before it processes the reply
	// (a paused process, a long GC pause) would believe past the store.
	held := l.held(ttl)
	l.mu.Lock()
	if vu := sent.Add(held - l.c.drift(held)); vu.Before(l.validUntil) {
		l.validUntil = vu
		if l.expiryTimer != nil {
			l.expiryTimer.Reset(time.Until(vu))
		}
	}
	l.mu.Unlock()
	err := l.dl.Extend(ctx, ttl)
	if errors.Is(err, ErrLeaseLost) {
		l.markStoreGone()
		lost := l.lostErr("a renewal found the lock no longer ours")
		l.end(lost)
		return lost
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return l.endedErr()
	}
	// The store now keeps the lock until sent+ttl, no longer: the deadline
	// becomes exactly that, earlier than before if ttl is shorter (keeping
	// the later one would let this lease outlive the store's lock).
	vu := sent.Add(held - l.c.drift(held))
	if !l.maxHoldAt.IsZero() && l.maxHoldAt.Before(vu) {
		vu = l.maxHoldAt
	}
	earlier := vu.Before(l.validUntil)
	l.validUntil = vu
	if earlier && l.expiryTimer != nil {
		l.expiryTimer.Reset(time.Until(vu))
	}
	l.ttl = ttl
	if l.renewTimer != nil && !l.stopRenew {
		l.renewTimer.Reset(time.Until(sent.Add(held / 3)))
	}
	l.mu.Unlock()
	return nil
}

// held is how long after a request is sent the store certainly keeps the
// lock asked for ttl: ttl, or less where the driver bounds it
// (driver.HoldBounder: a ZooKeeper session timeout shorter than ttl).
func (l *Lease) held(ttl time.Duration) time.Duration {
	if hb, ok := l.dl.(driver.HoldBounder); ok {
		if b := hb.HoldBound(); b > 0 && b < ttl {
			return b
		}
	}
	return ttl
}

// checkExpiry is the validity deadline timer's callback.
func (l *Lease) checkExpiry() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if rem := time.Until(l.validUntil); rem > 0 {
		l.expiryTimer.Reset(rem)
		l.mu.Unlock()
		return
	}
	maxHold := !l.maxHoldAt.IsZero() && !time.Now().Before(l.maxHoldAt)
	l.mu.Unlock()
	if maxHold {
		l.end(l.lostErr("MaxHold passed"))
		return
	}
	l.end(l.lostErr("the validity deadline passed without a successful renewal"))
}

// Release frees the lock, only if it is still ours, on a context detached
// from ctx (bounded by Options.ReleaseTimeout) so a cancelled caller still
// frees it. It returns nil if the lease was already released, ErrLeaseLost
// (wrapped) if the lease had ended by loss or the store found it no longer
// ours, and the store's error if the store could not be reached (the lease
// then ends anyway and the store frees the lock at its TTL).
// It never removes another holder's lock.
func (l *Lease) Release(ctx context.Context) error {
	const op = "release"
	if ctx == nil {
		ctx = context.Background()
	}
	// No renewal may start from now on, and one in flight is cut short:
	// Release supersedes it and must not wait it out.
	l.mu.Lock()
	l.stopRenew = true
	if l.renewTimer != nil {
		l.renewTimer.Stop()
	}
	if l.renewCancel != nil {
		l.renewCancel()
	}
	l.mu.Unlock()
	if err := l.lockOp(ctx); err != nil {
		// A store operation is still in flight (a driver slow to honour
		// cancellation). End the lease here and free the store side once
		// that operation returns, in the background, bounded as usual.
		l.end(&Error{Op: "lease", Backend: l.c.caps.Backend, Name: l.name, Err: fmt.Errorf("%w (the store release continues in the background)", ErrReleased)})
		go func() {
			_ = l.lockOp(context.Background())
			defer l.unlockOp()
			if !l.takeStoreSide() {
				return
			}
			_ = l.storeRelease(context.Background())
		}()
		return l.wrap(op, fmt.Errorf("waiting for a renewal in flight: %w", err))
	}
	defer l.unlockOp()
	l.mu.Lock()
	if l.ended {
		gone := l.storeGone
		l.storeGone = true
		l.mu.Unlock()
		err := l.endedErr()
		if errors.Is(err, ErrReleased) {
			return nil
		}
		if !gone {
			// Lost locally (deadline): free the store side if still ours.
			_ = l.storeRelease(ctx)
		}
		return l.wrap(op, err)
	}
	l.storeGone = true
	expired := !time.Now().Before(l.validUntil)
	l.mu.Unlock()
	err := l.storeRelease(ctx)
	switch {
	case expired || errors.Is(err, ErrLeaseLost):
		lost := l.lostErr("it had expired before Release")
		l.end(lost)
		return l.wrap(op, lost)
	case err != nil:
		l.end(&Error{Op: "lease", Backend: l.c.caps.Backend, Name: l.name, Err: fmt.Errorf("%w (the store could not confirm: %v)", ErrReleased, err)})
		return l.wrap(op, err)
	}
	l.released = Error{Op: "lease", Backend: l.c.caps.Backend, Name: l.name, Err: ErrReleased}
	l.end(&l.released)
	return nil
}

func (l *Lease) storeRelease(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.c.opts.ReleaseTimeout)
	defer cancel()
	return l.dl.Release(rctx)
}

// closeWithClient ends the lease because its Client is closing, releasing
// the store side if it is still ours.
// ctx bounds the whole close (Client.Close shares one deadline across its
// leases).
func (l *Lease) closeWithClient(ctx context.Context) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.stopRenew = true
	if l.renewTimer != nil {
		l.renewTimer.Stop()
	}
	if l.renewCancel != nil {
		l.renewCancel()
	}
	l.mu.Unlock()
	l.end(&Error{Op: "lease", Backend: l.c.caps.Backend, Name: l.name, Err: fmt.Errorf("%w: %w", ErrLeaseLost, ErrClosed)})
	if l.lockOp(ctx) != nil {
		return // the store frees it at its TTL
	}
	defer l.unlockOp()
	if l.takeStoreSide() {
		rctx, cancel := context.WithTimeout(ctx, l.c.opts.ReleaseTimeout)
		defer cancel()
		_ = l.dl.Release(rctx)
	}
}

// Abandon ends the lease without releasing it, as a crashed holder
// would: no renewal is sent from now on, Err becomes ErrLeaseLost, and
// the store keeps the lock until its TTL runs out (Lease.StoreTTL after
// the last renewal), then frees it for others. Release afterwards
// returns ErrLeaseLost and touches nothing. Use it to step down without
// handing over at once (package election's Run without ReleaseOnCancel).
func (l *Lease) Abandon() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.stopRenew = true
	if l.renewTimer != nil {
		l.renewTimer.Stop()
	}
	if l.renewCancel != nil {
		l.renewCancel()
	}
	l.storeGone = true
	l.mu.Unlock()
	l.end(l.lostErr("abandoned by its holder; the store frees it at its TTL"))
}

// takeStoreSide marks the store side as being freed and reports whether
// it still needed freeing (not already released or known lost).
func (l *Lease) takeStoreSide() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	gone := l.storeGone
	l.storeGone = true
	return !gone
}

func (l *Lease) markStoreGone() {
	l.mu.Lock()
	l.storeGone = true
	l.mu.Unlock()
}

// end ends the lease once with cause. When another goroutine is ending
// it, end waits until that has finished, so that whoever returns an error
// after end sees the lease ended (Err, Done).
func (l *Lease) end(cause error) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		l.waitEnd()
		return
	}
	l.ended = true
	if l.renewTimer != nil {
		l.renewTimer.Stop()
	}
	if l.expiryTimer != nil {
		l.expiryTimer.Stop()
	}
	unhook := l.unhook
	l.unhook = nil
	l.mu.Unlock()
	if unhook != nil {
		unhook() // like context.AfterFunc's stop: never blocks
	}
	// Bookkeeping first, so that whoever sees Done also sees the metrics.
	l.c.forget(l)
	l.c.m.held(l.sent)
	if errors.Is(cause, ErrLeaseLost) && !errors.Is(cause, ErrClosed) {
		l.c.m.add(l.c.m.lost)
		l.c.log.Warn("fencelock: lease lost", "name", l.name, "fence", l.fence, "err", cause)
	}
	l.mu.Lock()
	l.cause = cause
	if l.cancel != nil {
		l.cancel(cause) // only cancels children and starts AfterFuncs: never takes l.mu
	}
	if l.endWait != nil {
		close(l.endWait)
		l.endWait = nil
	}
	l.mu.Unlock()
}

// waitEnd waits until end has set the cause, and returns it. end sets
// ended before it sets the cause, and a caller that saw ended in between
// would read no cause at all. It must not be called with l.mu held.
func (l *Lease) waitEnd() error {
	l.mu.Lock()
	for l.cause == nil {
		if l.endWait == nil {
			l.endWait = make(chan struct{})
		}
		w := l.endWait
		l.mu.Unlock()
		<-w
		l.mu.Lock()
	}
	cause := l.cause
	l.mu.Unlock()
	return cause
}

// endedErr is why an ended lease ended (see waitEnd). It must not be
// called with l.mu held.
func (l *Lease) endedErr() error { return l.waitEnd() }

func (l *Lease) lostErr(why string) error {
	return &Error{Op: "lease", Backend: l.c.caps.Backend, Name: l.name, Err: fmt.Errorf("%w: %s", ErrLeaseLost, why)}
}

func (l *Lease) wrap(op string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		// Already carries backend and name; re-label the operation only.
		return &Error{Op: op, Backend: e.Backend, Name: e.Name, Err: e.Err}
	}
	return &Error{Op: op, Backend: l.c.caps.Backend, Name: l.name, Err: err}
}

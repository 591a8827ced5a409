package fencelock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/adminhook"
)

// Locker acquires leases on named locks. *Client implements it; depend on
// Locker in code that should work with any store (and with mem:// in tests).
type Locker interface {
	// Acquire blocks until the lock is held, ctx ends, or the wait bound
	// (AcquireOptions.Wait, else Options.DefaultWait) elapses.
	Acquire(ctx context.Context, name string, opts *AcquireOptions) (*Lease, error)
	// TryAcquire makes one attempt; ErrNotAcquired if the lock is held.
	TryAcquire(ctx context.Context, name string, opts *AcquireOptions) (*Lease, error)
}

// Capabilities describes a backend: fence guarantee, minimum TTL, time
// authority, wait mechanism, fairness, behaviour on node loss.
type Capabilities = driver.Capabilities

// Fence guarantees, re-exported from package driver.
const (
	FenceBestEffort  = driver.FenceBestEffort
	FenceTimeFloored = driver.FenceTimeFloored
	FenceStrict      = driver.FenceStrict
)

// MaxNameLen is the longest lock name (after the prefix), in bytes.
const MaxNameLen = driver.MaxNameLen

// MaxTTL is the longest TTL accepted: one year.
const MaxTTL = 366 * 24 * time.Hour

// Options configures a Client. The zero value (or nil) gives the defaults.
type Options struct {
	// Prefix is prepended to every lock name to make the store key.
	// Default: none (the store key is the name, for interop with other
	// clients; see each backend's package doc for its key layout).
	Prefix string
	// DefaultTTL is the lease TTL when AcquireOptions.TTL is 0.
	// Default: 15s, raised to the backend's MinTTL if that is larger.
	DefaultTTL time.Duration
	// DefaultWait bounds Acquire when AcquireOptions.Wait is 0.
	// Default: 0, wait until ctx ends.
	DefaultWait time.Duration
	// Backoff spaces the retries of a blocked Acquire on a backend that
	// retries attempts (mem, redlock), and bounds each wait for a release
	// notice there, as a fallback for a lost one. Backends whose store
	// queues waiters (redis, etcd, zookeeper, postgres) or that poll on a
	// schedule of their own (dynamodb, see its package doc) do not use it.
	// Default: DefaultBackoff.
	Backoff Backoff
	// ReleaseTimeout bounds Release, which runs on a context detached from
	// the caller's so that a cancelled caller still frees the lock.
	// Default: 5s.
	ReleaseTimeout time.Duration
	// DriftFactor is the share of the TTL subtracted (plus 2ms) from the
	// local validity deadline, for clock-rate drift between client and
	// store. Default: 0.01.
	DriftFactor float64
	// Logger receives lease-lost and renewal-failure events.
	// Default: discard.
	Logger *slog.Logger
	// MeterProvider receives fencelock's OpenTelemetry metrics (see the
	// package doc's # Observability). Default: otel.GetMeterProvider(), a
	// no-op until the application installs an SDK.
	MeterProvider metric.MeterProvider
}

// AcquireOptions configures one acquisition. nil gives the defaults.
type AcquireOptions struct {
	// TTL is how long the store keeps the lock without renewal.
	// Default: Options.DefaultTTL.
	TTL time.Duration
	// Wait bounds a blocking Acquire; after it, Acquire returns
	// ErrNotAcquired. Default: Options.DefaultWait (0: until ctx ends).
	// TryAcquire ignores it.
	Wait time.Duration
	// AutoRenew renews the lease at TTL/3 until Release, loss or MaxHold.
	// Default: on. Use Bool(false) to switch it off.
	AutoRenew *bool
	// MaxHold caps the total hold time even while renewing: when it passes
	// the lease ends with ErrLeaseLost (a hung worker must not hold forever).
	// Default: 0, no cap.
	MaxHold time.Duration
	// Label describes the holder: stored with the lock by backends that
	// keep labels (Capabilities.Inspect.Label; each backend's package doc
	// says where) and reported by Client.Inspect; package election
	// publishes a leader's value in it. At most MaxLabelLen bytes of
	// valid UTF-8. Default: DefaultLabel() ("host/pid").
	Label string
}

// MaxLabelLen is the longest AcquireOptions.Label, in bytes.
const MaxLabelLen = driver.MaxLabelLen

// Bool returns a pointer to b, for AcquireOptions.AutoRenew.
func Bool(b bool) *bool { return &b }

// Client is the portable lock client over one backend. It is safe for
// concurrent use. Create it with a backend package's New, with fencelock.New,
// or by URL with Open.
type Client struct {
	b      driver.Backend
	caps   Capabilities
	opts   Options
	log    *slog.Logger
	m      *metrics
	ctx    context.Context // cancelled by Close
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	closed bool
	leases map[*Lease]struct{}
}

var _ Locker = (*Client)(nil)

// New returns a Client over a driver backend. Backend packages call it; most
// applications use a backend package's New or Open instead. opts may be nil.
func New(b driver.Backend, opts *Options) *Client {
	c := &Client{b: b, caps: b.Capabilities(), leases: map[*Lease]struct{}{}}
	if opts != nil {
		c.opts = *opts
	}
	if c.opts.DefaultTTL <= 0 {
		c.opts.DefaultTTL = 15 * time.Second
		if c.opts.DefaultTTL < c.caps.MinTTL {
			c.opts.DefaultTTL = c.caps.MinTTL
		}
	}
	if c.opts.Backoff == nil {
		c.opts.Backoff = DefaultBackoff
	}
	if c.opts.ReleaseTimeout <= 0 {
		c.opts.ReleaseTimeout = 5 * time.Second
	}
	if c.opts.DriftFactor <= 0 {
		c.opts.DriftFactor = 0.01
	}
	c.log = c.opts.Logger
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.m = newMetrics(c.opts.MeterProvider, c.caps.Backend)
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	return c
}

func init() {
	adminhook.Register(func(c any) (driver.Admin, bool) {
		a, ok := c.(*Client).b.(driver.Admin)
		return a, ok
	})
}

// Capabilities describes the backend.
func (c *Client) Capabilities() Capabilities { return c.caps }

// As sets target to the backend's native client when it has a supported
// type (see the backend's package doc) and reports whether it did. The
// backend's out-of-band admin hooks (driver.Admin) are not handed out:
// they end other holders' locks, and only the conformance suite gets them.
func (c *Client) As(target any) bool {
	if a, ok := c.b.(driver.Aser); ok && target != nil {
		return a.As(target)
	}
	return false
}

// Close releases the leases still held through this client, in parallel
// and within one Options.ReleaseTimeout overall (a lock it could not free
// in time expires with its TTL), ends waiting acquires with ErrClosed, and
// closes the backend. Later calls return ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.wrap("close", "", ErrClosed)
	}
	c.closed = true
	leases := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		leases = append(leases, l)
	}
	c.mu.Unlock()
	c.cancel(ErrClosed)
	c.closeLeases(leases)
	if err := c.b.Close(); err != nil {
		return c.wrap("close", "", err)
	}
	return nil
}

// closeParallelism bounds the releases Close runs at once.
const closeParallelism = 64

// closeLeases ends every lease and frees its store side, closeParallelism
// at a time, all under one ReleaseTimeout deadline.
func (c *Client) closeLeases(leases []*Lease) {
	if len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.ReleaseTimeout)
	defer cancel()
	next := make(chan *Lease)
	var wg sync.WaitGroup
	for range min(len(leases), closeParallelism) {
		wg.Go(func() {
			for l := range next {
				l.closeWithClient(ctx)
			}
		})
	}
	for _, l := range leases {
		next <- l
	}
	close(next)
	wg.Wait()
}

// TryAcquire makes one attempt to take the lock named name. It returns
// ErrNotAcquired (wrapped) if another owner holds it.
func (c *Client) TryAcquire(ctx context.Context, name string, opts *AcquireOptions) (*Lease, error) {
	const op = "try-acquire"
	o, err := c.resolve(name, opts)
	if err != nil {
		return nil, c.wrap(op, name, err)
	}
	if err := c.usable(ctx); err != nil {
		return nil, c.wrap(op, name, err)
	}
	start := time.Now()
	l, err := c.tryOnce(ctx, name, o)
	if err != nil {
		return nil, c.wrap(op, name, c.cancelErr(ctx, err))
	}
	c.m.granted(l.fence, start)
	return l, nil
}

// errWaitElapsed is the cancel cause of Acquire's own wait bound.
var errWaitElapsed = errors.New("wait bound elapsed")

// Acquire blocks until the lock named name is held. It returns an error for
// which errors.Is(err, ctx.Err()) holds when ctx ends first, and
// ErrNotAcquired when the wait bound elapses first; either way nothing is
// left held. Acquire does not retry a store that cannot be reached: it
// returns ErrUnavailable.
func (c *Client) Acquire(ctx context.Context, name string, opts *AcquireOptions) (*Lease, error) {
	const op = "acquire"
	o, err := c.resolve(name, opts)
	if err != nil {
		return nil, c.wrap(op, name, err)
	}
	if err := c.usable(ctx); err != nil {
		return nil, c.wrap(op, name, err)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.ctx, func() { cancel(ErrClosed) })
	defer stop()
	if o.wait > 0 {
		var cancelT context.CancelFunc
		wctx, cancelT = context.WithTimeoutCause(wctx, o.wait, errWaitElapsed)
		defer cancelT()
	}
	start := time.Now()
	l, err := c.acquireLoop(wctx, name, o)
	if err != nil {
		return nil, c.wrap(op, name, c.waitErr(ctx, wctx, err, o.wait))
	}
	c.m.granted(l.fence, start)
	return l, nil
}

func (c *Client) acquireLoop(ctx context.Context, name string, o resolved) (*Lease, error) {
	if bl, ok := c.b.(driver.Blocker); ok {
		req := driver.AcquireRequest{Name: o.key, Token: newToken(), TTL: o.ttl, Backoff: c.opts.Backoff, Label: o.label}
		c.m.add(c.m.attempts)
		dl, sent, err := bl.Acquire(ctx, req)
		if err != nil {
			return nil, err
		}
		return c.adopt(ctx, name, o, dl, sent)
	}
	w, _ := c.b.(driver.Waiter)
	for attempt := 0; ; attempt++ {
		l, err := c.tryOnce(ctx, name, o)
		if err == nil || !errors.Is(err, ErrNotAcquired) {
			return l, err
		}
		d := c.opts.Backoff(attempt)
		if w != nil {
			// A notification ends the wait early; the backoff bounds it in
			// case the notification is lost or the lock simply expires.
			pctx, cancel := context.WithTimeout(ctx, d)
			err = w.Wait(pctx, o.key)
			cancel()
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			_ = err // a failed wait is only a hint: retry TryAcquire
			continue
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
	}
}

// tryOnce makes one driver attempt and wraps a grant in a Lease.
func (c *Client) tryOnce(ctx context.Context, name string, o resolved) (*Lease, error) {
	req := driver.AcquireRequest{Name: o.key, Token: newToken(), TTL: o.ttl, Label: o.label}
	sent := time.Now()
	c.m.add(c.m.attempts)
	var dl driver.Lease
	var err error
	if ta, ok := c.b.(driver.TimedTryAcquirer); ok {
		var at time.Time
		dl, at, err = ta.TryAcquireAt(ctx, req)
		if err == nil && at.Before(sent) {
			sent = at // the TTL clock started before this attempt
		}
	} else {
		dl, err = c.b.TryAcquire(ctx, req)
	}
	if err != nil {
		if errors.Is(err, ErrNotAcquired) {
			c.m.add(c.m.notAcquired)
		}
		return nil, err
	}
	return c.adopt(ctx, name, o, dl, sent)
}

// adopt turns a driver grant into a Lease, unless ctx ended or the client
// closed meanwhile, in which case the grant is released and the error
// returned: a cancelled acquire leaves nothing held.
func (c *Client) adopt(ctx context.Context, name string, o resolved, dl driver.Lease, sent time.Time) (*Lease, error) {
	if err := context.Cause(ctx); err != nil {
		c.releaseDetached(ctx, dl)
		return nil, err
	}
	l := newLease(ctx, c, name, o, dl, sent)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.releaseDetached(ctx, dl)
		l.end(ErrClosed)
		return nil, ErrClosed
	}
	c.leases[l] = struct{}{}
	c.mu.Unlock()
	l.start()
	return l, nil
}

func (c *Client) releaseDetached(ctx context.Context, dl driver.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.ReleaseTimeout)
	defer cancel()
	if err := dl.Release(rctx); err != nil && !errors.Is(err, ErrLeaseLost) {
		c.log.Warn("fencelock: could not release a lock granted during cancellation; it expires with its TTL", "err", err)
	}
}

func (c *Client) forget(l *Lease) {
	c.mu.Lock()
	delete(c.leases, l)
	c.mu.Unlock()
}

// usable reports ErrClosed or a ctx error before any I/O.
func (c *Client) usable(ctx context.Context) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context: pass context.Background() or a request context", ErrInvalid)
	}
	return context.Cause(ctx)
}

// cancelErr prefers the ctx error when ctx ended during an attempt, so that
// errors.Is(err, ctx.Err()) holds for the caller.
//
// A ctx whose deadline has passed counts as ended even before ctx.Err() is
// set: a store client (gRPC, pgx) that timed out on the same deadline by
// its own clock may return first, with an error of its own.
func (c *Client) cancelErr(ctx context.Context, err error) error {
	cerr := ctxEnded(ctx)
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	return err
}

// ctxEnded is ctx.Err(), or context.DeadlineExceeded once ctx's deadline
// has passed.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// waitErr maps the end of a blocking wait to the caller's view: the caller's
// ctx error, ErrClosed, ErrNotAcquired for the wait bound, or the error.
func (c *Client) waitErr(parent, wctx context.Context, err error, wait time.Duration) error {
	switch perr := ctxEnded(parent); {
	case perr != nil:
		if errors.Is(err, perr) {
			return err
		}
		return fmt.Errorf("%w (%w)", perr, err)
	case errors.Is(context.Cause(wctx), ErrClosed):
		return ErrClosed
	case errors.Is(context.Cause(wctx), errWaitElapsed):
		return fmt.Errorf("%w: still held after waiting %v; raise AcquireOptions.Wait or use TryAcquire", ErrNotAcquired, wait)
	}
	return err
}

func (c *Client) wrap(op, name string, err error) error {
	var e *Error
	if errors.As(err, &e) && e.Op == op {
		return err
	}
	return &Error{Op: op, Backend: c.caps.Backend, Name: name, Err: err}
}

// resolved is AcquireOptions with defaults applied and checked.
type resolved struct {
	key       string
	ttl       time.Duration
	wait      time.Duration
	autoRenew bool
	maxHold   time.Duration
	label     string
}

func (c *Client) resolve(name string, opts *AcquireOptions) (resolved, error) {
	var o AcquireOptions
	if opts != nil {
		o = *opts
	}
	r := resolved{key: c.opts.Prefix + name, ttl: o.TTL, wait: o.Wait, autoRenew: true, maxHold: o.MaxHold}
	if err := ValidateName(name); err != nil {
		return r, err
	}
	if len(r.key) > MaxNameLen {
		return r, fmt.Errorf("%w: lock name with prefix is %d bytes, over the %d-byte limit: use a shorter name or prefix", ErrInvalid, len(r.key), MaxNameLen)
	}
	if r.ttl == 0 {
		r.ttl = c.opts.DefaultTTL
	}
	if err := c.checkTTL(r.ttl); err != nil {
		return r, err
	}
	if r.wait == 0 {
		r.wait = c.opts.DefaultWait
	}
	if r.wait < 0 {
		return r, fmt.Errorf("%w: negative Wait %v: use 0 to wait until ctx ends", ErrInvalid, r.wait)
	}
	if r.maxHold < 0 {
		return r, fmt.Errorf("%w: negative MaxHold %v: use 0 for no cap", ErrInvalid, r.maxHold)
	}
	if o.AutoRenew != nil {
		r.autoRenew = *o.AutoRenew
	}
	r.label = o.Label
	if r.label == "" {
		r.label = c.defaultLabel()
	}
	if err := c.checkLabel(r.label); err != nil {
		return r, err
	}
	return r, nil
}

func (c *Client) checkTTL(ttl time.Duration) error {
	switch {
	case ttl < 0:
		return fmt.Errorf("%w: negative TTL %v: pass a positive TTL, or 0 for the default %v", ErrInvalid, ttl, c.opts.DefaultTTL)
	case ttl < c.caps.MinTTL:
		return fmt.Errorf("%w: TTL %v is below the %s backend's minimum %v: pass a longer TTL", ErrInvalid, ttl, c.caps.Backend, c.caps.MinTTL)
	case ttl > MaxTTL:
		return fmt.Errorf("%w: TTL %v is over the %v maximum: use a shorter TTL with AutoRenew", ErrInvalid, ttl, MaxTTL)
	}
	return nil
}

// ValidateName reports whether name can be a lock name: non-empty, valid
// UTF-8, no NUL byte, at most MaxNameLen bytes. Any other string is allowed,
// including "/" and unicode; backends map names to store keys safely.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty lock name: pass a non-empty name", ErrInvalid)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: lock name is %d bytes, over the %d-byte limit: use a shorter name (e.g. a hash)", ErrInvalid, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: lock name is not valid UTF-8", ErrInvalid)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return fmt.Errorf("%w: lock name contains a NUL byte", ErrInvalid)
		}
	}
	return nil
}

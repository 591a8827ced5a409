package memory

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"sync"
	"time"

	"github.com/fencelock/fencelock/backends/memory/internal/wire"
	"github.com/fencelock/fencelock/driver"
)

// Serve serves s over net/rpc on ln until ln is closed, so that other
// processes can share it with the URL memrpc://ADDR (ADDR = ln.Addr()).
// It exists for multi-process tests (the conformance suite's process-freeze
// check); it has no authentication: listen on loopback only.
func Serve(ln net.Listener, s *Store) error {
	srv := rpc.NewServer()
	if err := srv.RegisterName("Store", &rpcStore{s: s}); err != nil {
		return err
	}
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go srv.ServeConn(conn)
	}
}

type rpcStore struct{ s *Store }

func code(err error) int {
	switch {
	case err == nil:
		return wire.OK
	case errors.Is(err, driver.ErrNotAcquired):
		return wire.NotAcquired
	default:
		return wire.LeaseLost
	}
}

func (r *rpcStore) TryAcquire(a wire.Args, rep *wire.Reply) error {
	f, _, err := r.s.tryAcquire(0, a.Name, a.Token, a.Label, a.TTL)
	rep.Code, rep.Fence = code(err), f
	return nil
}

func (r *rpcStore) Extend(a wire.Args, rep *wire.Reply) error {
	rep.Code = code(r.s.extend(a.Name, a.Token, a.TTL))
	return nil
}

func (r *rpcStore) Release(a wire.Args, rep *wire.Reply) error {
	rep.Code = code(r.s.release(a.Name, a.Token))
	return nil
}

// Inspect reports a.Name's holder.
func (r *rpcStore) Inspect(a wire.Args, rep *wire.Reply) error {
	i := r.s.Inspect(a.Name)
	rep.Held, rep.Label, rep.Fence, rep.Remaining = i.Held, i.Label, i.Fence, i.Remaining
	return nil
}

// SetLabel relabels a.Name if a.Token holds it.
func (r *rpcStore) SetLabel(a wire.Args, rep *wire.Reply) error {
	rep.Code = code(r.s.setLabel(a.Name, a.Token, a.Label))
	return nil
}

// Wait waits at most a.TTL for a.Name to be free.
func (r *rpcStore) Wait(a wire.Args, rep *wire.Reply) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.TTL)
	defer cancel()
	_ = r.s.wait(ctx, a.Name)
	return nil
}

// rpcBackend is the driver for memrpc://. It holds one connection and
// dials a new one for the next call after the old one broke (a reset, the
// serving process restarting its listener): calls in flight on a broken
// connection fail with ErrUnavailable, later ones use the new connection.
type rpcBackend struct {
	addr string

	mu     sync.Mutex
	c      *rpc.Client // nil: dial at the next call
	closed bool
}

var _ driver.Waiter = (*rpcBackend)(nil)

func dialRPC(ctx context.Context, addr string) (*rpcBackend, error) {
	b := &rpcBackend{addr: addr}
	if _, err := b.client(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// client returns the current connection, dialling one if there is none.
func (b *rpcBackend) client(ctx context.Context) (*rpc.Client, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("%w: memrpc %s: client closed", driver.ErrUnavailable, b.addr)
	}
	if b.c == nil {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", b.addr)
		if err != nil {
			return nil, fmt.Errorf("%w: memrpc %s: %v", driver.ErrUnavailable, b.addr, err)
		}
		b.c = rpc.NewClient(conn)
	}
	return b.c, nil
}

// broken forgets c after a call on it failed for a reason other than the
// server's answer (the connection is gone), so the next call redials.
func (b *rpcBackend) broken(c *rpc.Client, err error) {
	var se rpc.ServerError
	if errors.As(err, &se) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c == c {
		_ = c.Close()
		b.c = nil
	}
}

// start sends method; the call's Done channel answers.
func (b *rpcBackend) start(ctx context.Context, method string, a wire.Args, rep *wire.Reply) (*rpc.Client, *rpc.Call, error) {
	c, err := b.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c, c.Go("Store."+method, a, rep, make(chan *rpc.Call, 1)), nil
}

func (b *rpcBackend) call(ctx context.Context, method string, a wire.Args) (wire.Reply, error) {
	rep := new(wire.Reply)
	c, call, err := b.start(ctx, method, a, rep)
	if err != nil {
		return wire.Reply{}, err
	}
	select {
	case <-call.Done:
		return b.finish(c, call, rep)
	case <-ctx.Done():
		return wire.Reply{}, ctx.Err()
	}
}

func (b *rpcBackend) finish(c *rpc.Client, call *rpc.Call, rep *wire.Reply) (wire.Reply, error) {
	if call.Error != nil {
		b.broken(c, call.Error)
		return wire.Reply{}, fmt.Errorf("%w: memrpc: %v", driver.ErrUnavailable, call.Error)
	}
	return *rep, nil
}

func (b *rpcBackend) TryAcquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, error) {
	a := wire.Args{Name: req.Name, Token: req.Token, Label: req.Label, TTL: req.TTL}
	rep := new(wire.Reply)
	c, call, err := b.start(ctx, "TryAcquire", a, rep)
	if err != nil {
		return nil, err
	}
	select {
	case <-call.Done:
	case <-ctx.Done():
		// Outcome unknown: the server may still grant it. Wait for the
		// answer (bounded) and free a grant, so nothing is left held.
		select {
		case <-call.Done:
			if r, err := b.finish(c, call, rep); err == nil && r.Code == wire.OK {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_, _ = b.call(rctx, "Release", a)
			}
		case <-time.After(5 * time.Second):
		}
		return nil, ctx.Err()
	}
	r, err := b.finish(c, call, rep)
	if err != nil {
		return nil, err
	}
	if r.Code == wire.NotAcquired {
		return nil, driver.ErrNotAcquired
	}
	return &rpcLease{b: b, name: req.Name, token: req.Token, fence: r.Fence}, nil
}

func (b *rpcBackend) Wait(ctx context.Context, name string) error {
	d := time.Second
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		d = time.Until(dl)
	}
	if d <= 0 {
		return ctx.Err()
	}
	_, err := b.call(ctx, "Wait", wire.Args{Name: name, TTL: d})
	return err
}

func (b *rpcBackend) Capabilities() driver.Capabilities {
	c := capabilities
	c.Backend = "memrpc"
	c.LossSignal = 0 // a lease learns of a drop from its next renewal
	// Wait is an RPC the serving process answers at a release or expiry
	// (or after 1 s): one round trip on loopback.
	c.ReleaseWake, c.ExpiryWake = 50*time.Millisecond, 50*time.Millisecond
	return c
}

// Inspect implements driver.Inspector with one round trip.
func (b *rpcBackend) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	r, err := b.call(ctx, "Inspect", wire.Args{Name: name})
	if err != nil {
		return driver.LockInfo{}, err
	}
	return driver.LockInfo{Held: r.Held, Label: r.Label, Fence: r.Fence, Remaining: r.Remaining, Waiters: -1}, nil
}

func (b *rpcBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.c == nil {
		return nil
	}
	err := b.c.Close()
	b.c = nil
	return err
}

type rpcLease struct {
	b           *rpcBackend
	name, token string
	fence       driver.Fence
}

func (l *rpcLease) Fence() driver.Fence { return l.fence }

func (l *rpcLease) Extend(ctx context.Context, ttl time.Duration) error {
	return l.result(l.b.call(ctx, "Extend", wire.Args{Name: l.name, Token: l.token, TTL: ttl}))
}

func (l *rpcLease) Release(ctx context.Context) error {
	return l.result(l.b.call(ctx, "Release", wire.Args{Name: l.name, Token: l.token}))
}

// SetLabel implements driver.Relabeler.
func (l *rpcLease) SetLabel(ctx context.Context, label string) error {
	return l.result(l.b.call(ctx, "SetLabel", wire.Args{Name: l.name, Token: l.token, Label: label}))
}

func (l *rpcLease) result(rep wire.Reply, err error) error {
	if err != nil {
		return err
	}
	if rep.Code != wire.OK {
		return fmt.Errorf("%w: %q is not held under this lease's token", driver.ErrLeaseLost, l.name)
	}
	return nil
}

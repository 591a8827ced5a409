package zookeeper

// Errors (internals; the package doc in doc.go has what users need).
//
// go-zookeeper takes no context: each request is bounded by ctx and
// Config.RequestTimeout (default 5s). No answer in time, a lost
// connection or no server yields errors wrapping fencelock.ErrUnavailable;
// when the caller's ctx ends first the error matches the ctx error.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// errTimeout: a request got no answer within Config.RequestTimeout.
var errTimeout = errors.New("no answer within the request timeout")

type result[T any] struct {
	v   T
	err error
}

// call runs f, one blocking go-zookeeper request, bounded by ctx and the
// request timeout. go-zookeeper takes no context: when the bound passes
// first, f finishes in the background (go-zookeeper fails every request
// when its connection or session ends, and on Close) and its result is
// dropped. A request go-zookeeper could not send (ErrNoServer: between
// connections) is sent again. The error is f's, ctx's, or errTimeout; map
// it with fail.
func call[T any](b *backend, ctx context.Context, f func() (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	for {
		ch := make(chan result[T], 1)
		go func() {
			v, err := f()
			ch <- result[T]{v, err}
		}()
		var zero T
		select {
		case r := <-ch:
			if !errors.Is(r.err, zk.ErrNoServer) {
				return r.v, r.err
			}
			// Never sent (go-zookeeper is between connections): send it
			// again once it has reconnected, within the request timeout.
			select {
			case <-time.After(50 * time.Millisecond):
				continue
			case <-ctx.Done():
				return zero, ctx.Err()
			case <-t.C:
				return zero, fmt.Errorf("%w: %w", errTimeout, r.err)
			}
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-t.C:
			return zero, errTimeout
		}
	}
}

// fail maps an error of the request op to the driver's errors, wrapping it
// once: the caller's ctx error stays visible to errors.Is; an ensemble that
// does not answer or a lost connection becomes ErrUnavailable.
func (b *backend) fail(ctx context.Context, op string, err error) error {
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return fmt.Errorf("zookeeper %s: %w", op, err)
	case ctx.Err() != nil:
		return fmt.Errorf("zookeeper %s: %w (%v)", op, ctx.Err(), err)
	case errors.Is(err, errTimeout):
		return fmt.Errorf("%w: zookeeper %s: no answer within %v (request timeout)", driver.ErrUnavailable, op, b.timeout)
	case unavailable(err):
		return fmt.Errorf("%w: zookeeper %s: %v", driver.ErrUnavailable, op, err)
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed), errors.Is(err, zk.ErrInvalidACL):
		return fmt.Errorf("zookeeper %s: %w: check Config.Digest and the ACLs of the lock path", op, err)
	}
	return fmt.Errorf("zookeeper %s: %w", op, err)
}

// connLost reports a request that failed because its connection broke:
// go-zookeeper's ErrConnectionClosed, or the network error of a write it
// could not make. The server may have applied the request.
func connLost(err error) bool {
	var ne net.Error
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		errors.As(err, &ne)
}

// unavailable reports errors that mean "no server could serve it now".
func unavailable(err error) bool {
	return errors.Is(err, zk.ErrNoServer) || connLost(err) ||
		errors.Is(err, zk.ErrClosing) || errors.Is(err, zk.ErrSessionExpired) ||
		errors.Is(err, zk.ErrSessionMoved) || errors.Is(err, errTimeout)
}

// uncertain reports errors after which a write may or may not have been
// applied.
func uncertain(err error) bool {
	return connLost(err) || errors.Is(err, errTimeout) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

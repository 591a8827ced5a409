package etcd

// Errors (internals; the package doc in doc.go has what users need).
//
// A cluster that does not answer within Config.RequestTimeout (default 5 s)
// yields errors wrapping fencelock.ErrUnavailable; when the caller's ctx
// ends first the error matches the ctx error (and ErrUnavailable too if no
// endpoint was connected).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/fencelock/fencelock/driver"
)

// fail maps an error of the request op to the driver's errors, wrapping
// it once: the caller's ctx error stays visible to errors.Is; a cluster
// that did not answer or has no leader becomes ErrUnavailable.
func (b *backend) fail(ctx context.Context, op string, err error) error {
	if d, ok := ctx.Deadline(); ok && ctx.Err() == nil && deadlineStatus(err) && time.Until(d) < callerDeadlineSlack {
		// gRPC sends the caller's deadline to the server, which may give up
		// a moment before the local timer fires: it is the caller's
		// deadline all the same.
		select {
		case <-ctx.Done():
		case <-time.After(callerDeadlineSlack):
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		if !b.connected() {
			return fmt.Errorf("%w: etcd %s: no etcd endpoint is connected: %w", driver.ErrUnavailable, op, cerr)
		}
		return fmt.Errorf("etcd %s: %w", op, cerr)
	}
	switch {
	case b.cli.Ctx().Err() != nil:
		return fmt.Errorf("%w: etcd %s: the etcd client is closed", driver.ErrUnavailable, op)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: etcd %s: no answer within %v (request timeout)", driver.ErrUnavailable, op, b.timeout)
	case isLeaseNotFound(err):
		return fmt.Errorf("%w: etcd %s: %v", driver.ErrLeaseLost, op, err)
	case unavailable(err):
		return fmt.Errorf("%w: etcd %s: %v", driver.ErrUnavailable, op, err)
	case misconfigured(err):
		return fmt.Errorf("%w: etcd %s: %v: check the URL: the endpoint must be an etcd client URL (v3 API, port 2379 by default) and the user and password right", driver.ErrInvalid, op, err)
	}
	return fmt.Errorf("etcd %s: %w", op, err)
}

// misconfigured reports errors that mean the request can never succeed
// with this configuration: a server that does not implement etcd's v3
// gRPC API (an HTTP server answers 404, which gRPC reports as
// Unimplemented), or credentials it refuses.
func misconfigured(err error) bool {
	code := codes.OK
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	} else if s, ok := status.FromError(err); ok {
		code = s.Code()
	}
	switch code {
	case codes.Unimplemented, codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}

// callerDeadlineSlack: a DeadlineExceeded status that arrives this close
// to the caller's deadline is that deadline.
const callerDeadlineSlack = 100 * time.Millisecond

// deadlineStatus reports a gRPC DeadlineExceeded status, or the server's
// own context error passed on as codes.Unknown (etcd 3.4 does that when
// the deadline it was sent ends inside a request).
func deadlineStatus(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.DeadlineExceeded
	}
	s, ok := status.FromError(err)
	return ok && (s.Code() == codes.DeadlineExceeded ||
		s.Code() == codes.Unknown && s.Message() == context.DeadlineExceeded.Error())
}

// connected reports whether the client has a ready connection to some
// endpoint.
func (b *backend) connected() bool {
	conn := b.cli.ActiveConnection()
	return conn != nil && conn.GetState() == connectivity.Ready
}

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound)
}

// unavailable reports errors that mean "the cluster could not serve it
// now": no leader, timeouts, lost connections.
func unavailable(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted:
			return true
		}
		return false
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted:
			return true
		}
	}
	return false
}

// retryable reports codes.Unavailable: no leader, a member stopping, a
// broken connection. An idempotent request can be sent again.
func retryable(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unavailable
}

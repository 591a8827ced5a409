package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// reachTimeout bounds the TCP connect that Open tries on each endpoint
// before it asks the cluster anything.
const reachTimeout = 2 * time.Second

// reach connects to each endpoint (host:port) over TCP, at once, and
// returns nil as soon as one accepts. If every one refuses or fails, it
// returns an error wrapping ErrUnavailable that names each failure: the
// etcd client itself waits for a ready connection until the request
// timeout runs out (5 s by default), so without this a refused port would
// take that long to report.
func reach(parent context.Context, eps []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(parent, min(timeout, reachTimeout))
	defer cancel()
	errs := make(chan error, len(eps))
	for _, ep := range eps {
		go func() {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", ep)
			if err == nil {
				_ = c.Close()
			}
			errs <- err
		}()
	}
	var failed []string
	for range eps {
		err := <-errs
		if err == nil {
			return nil
		}
		failed = append(failed, err.Error())
	}
	if err := parent.Err(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		// Slow, not refused: let the client's own timeout decide.
		return nil
	}
	return fmt.Errorf("%w: cannot reach etcd at %s: no endpoint accepts connections: %s", driver.ErrUnavailable, strings.Join(eps, ","), strings.Join(failed, "; "))
}

// probeDelay is how long a request runs before unreachable starts probing
// the endpoints: a healthy cluster answers well within it, so the probe
// costs nothing there.
const probeDelay = 100 * time.Millisecond

// unreachable runs f with a context that ends, with a cause wrapping
// ErrUnavailable, as soon as a probe (started probeDelay after f) finds
// that no endpoint accepts TCP connections: the etcd client waits for a
// ready connection until ctx ends, so without it a request to a dead
// cluster takes its whole timeout. It returns that cause when f failed
// after the probe ended it, and f's error otherwise. A paused or slow server still
// accepts connections and is left to ctx.
func (b *backend) unreachable(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	probed := make(chan struct{})
	t := time.AfterFunc(probeDelay, func() {
		defer close(probed)
		if err := reach(ctx, b.cli.Endpoints(), b.timeout); errors.Is(err, driver.ErrUnavailable) {
			cancel(err)
		}
	})
	err := f(ctx)
	if !t.Stop() {
		cancel(nil) // ends a probe still dialling
		<-probed
	}
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, driver.ErrUnavailable) {
		return cause
	}
	return err
}

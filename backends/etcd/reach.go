package etcd

import (
	"context"
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

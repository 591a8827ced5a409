package zookeeper

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// Scheme is the URL scheme this package registers:
//
//	zk://host1:2181,host2:2181[/root][?session_timeout=10s&request_timeout=5s]
//
// The hosts are the ensemble's client addresses (port 2181 if omitted;
// give the last host a port, as Go's URL parser checks only that one). The
// path is Config.Root. session_timeout sets Config.SessionTimeout and
// request_timeout Config.RequestTimeout; any other parameter is rejected.
// Credentials (digest auth, ACLs) and a dialer go in URLOpener.Config,
// not in the URL.
const Scheme = "zk"

func init() { fencelock.Register(Scheme, &URLOpener{}) }

// URLOpener opens zk:// URLs.
type URLOpener struct {
	// Config is the template: the URL sets its Servers and Root, and its
	// SessionTimeout and RequestTimeout when given; the rest (Digest,
	// Auth, ACL, Dialer, Logger) is used as is.
	Config Config
}

// OpenBackendURL opens a backend for u. It connects once to read the
// servers' minimum session timeout (ErrUnavailable if none answers).
func (o *URLOpener) OpenBackendURL(ctx context.Context, u *url.URL) (driver.Backend, error) {
	q := u.Query()
	if err := fencelock.UnknownParams(q, "session_timeout", "request_timeout"); err != nil {
		return nil, err
	}
	cfg := o.Config
	for _, p := range []struct {
		name string
		dst  *time.Duration
	}{{"session_timeout", &cfg.SessionTimeout}, {"request_timeout", &cfg.RequestTimeout}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w: zk URL: %s=%q: want a positive Go duration such as 10s", driver.ErrInvalid, p.name, v)
		}
		*p.dst = d
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: zk URL: credentials do not go in the URL: set URLOpener.Config.Digest", driver.ErrInvalid)
	}
	cfg.Root = u.Path
	var err error
	if cfg.Servers, err = servers(u.Host); err != nil {
		return nil, err
	}
	return newBackend(ctx, cfg)
}

// servers splits "h1:2181,h2" into host:port addresses.
func servers(hosts string) ([]string, error) {
	var s []string
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2181")
		}
		s = append(s, h)
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("%w: zk URL has no hosts: want zk://host1:2181,host2:2181/root", driver.ErrInvalid)
	}
	return s, nil
}

// RewriteStoreAddrs implements fencelock.AddrRewriter (the conformance
// suite's fault proxy puts one listener in front of each server).
func (o *URLOpener) RewriteStoreAddrs(u *url.URL, rewrite func(addr string) (string, error)) (*url.URL, error) {
	u2 := *u
	if err := fencelock.RewriteHostList(&u2, "2181", rewrite); err != nil {
		return nil, err
	}
	return &u2, nil
}

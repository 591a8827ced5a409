package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// Scheme is the URL scheme this package registers:
//
//	etcd://[user:password@]host1:2379,host2:2379[/key/prefix][?request_timeout=5s]
//
// The hosts are the cluster's client endpoints (port 2379 if omitted; give
// the last host a port, as Go's URL parser checks only that one). The path,
// if any, plus "/" is Config.KeyPrefix. request_timeout sets
// Config.RequestTimeout. The Client owns the etcd client it opens and
// closes it on Close. For TLS or other client settings register a
// URLOpener with them under another scheme, or use New.
const Scheme = "etcd"

func init() { fencelock.Register(Scheme, &URLOpener{}) }

// URLOpener opens etcd:// URLs.
type URLOpener struct {
	// Client is the template for the etcd client (TLS, credentials, dial
	// options, logger). Its Endpoints are replaced by the URL's hosts and
	// its Username and Password by the URL's, if given. A nil Logger means
	// silent: fencelock reports what matters through its own errors.
	Client clientv3.Config
	// RequestTimeout is the default for the request_timeout parameter.
	RequestTimeout time.Duration
}

// OpenBackendURL opens a backend for u. It asks the cluster for its
// shortest lease TTL (ProbeMinTTL, one lease grant and revoke, bounded by
// ctx and the request timeout), which becomes Capabilities().MinTTL; a
// cluster that does not answer fails Open with ErrUnavailable, at once if
// no endpoint accepts a TCP connection; a server that is not etcd (an HTTP
// server, say) fails it with ErrInvalid.
func (o *URLOpener) OpenBackendURL(ctx context.Context, u *url.URL) (driver.Backend, error) {
	cc, cfg, err := o.parse(u)
	if err != nil {
		return nil, err
	}
	eps := cc.Endpoints
	if err := reach(ctx, eps, cfg.RequestTimeout); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("%w: etcd client for %s: %v", driver.ErrUnavailable, strings.Join(eps, ","), err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	cfg.MinTTL, err = ProbeMinTTL(pctx, cli)
	cancel()
	if err != nil {
		b := newBackend(cli, &cfg, true)
		err = b.fail(ctx, "probe the cluster (grant a 1 s lease to read its minimum TTL)", err)
		_ = b.Close()
		if errors.Is(err, driver.ErrInvalid) {
			return nil, fmt.Errorf("etcd at %s: %w", strings.Join(eps, ","), err)
		}
		return nil, fmt.Errorf("cannot reach etcd at %s: %w", strings.Join(eps, ","), err)
	}
	return newBackend(cli, &cfg, true), nil
}

// parse turns u into the etcd client's configuration and the backend's,
// with the request timeout resolved; no I/O.
func (o *URLOpener) parse(u *url.URL) (clientv3.Config, Config, error) {
	q := u.Query()
	if err := fencelock.UnknownParams(q, "request_timeout"); err != nil {
		return clientv3.Config{}, Config{}, err
	}
	cfg := Config{RequestTimeout: o.RequestTimeout}
	if v := q.Get("request_timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return clientv3.Config{}, Config{}, fmt.Errorf("%w: etcd URL: request_timeout=%q: want a positive Go duration such as 5s", driver.ErrInvalid, v)
		}
		cfg.RequestTimeout = d
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		cfg.KeyPrefix = p + "/"
	}
	eps, err := endpoints(u.Host)
	if err != nil {
		return clientv3.Config{}, Config{}, err
	}
	cc := o.Client
	cc.Endpoints = eps
	cc.Context = nil // the client outlives the ctx of Open
	if u.User != nil {
		cc.Username = u.User.Username()
		cc.Password, _ = u.User.Password()
	}
	if cc.Logger == nil {
		cc.Logger = zap.NewNop()
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	return cc, cfg, nil
}

// endpoints splits "h1:2379,h2" into host:port endpoints.
func endpoints(hosts string) ([]string, error) {
	var eps []string
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2379")
		}
		eps = append(eps, h)
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("%w: etcd URL has no hosts: want etcd://host1:2379,host2:2379/prefix", driver.ErrInvalid)
	}
	return eps, nil
}

// RewriteStoreAddrs implements fencelock.AddrRewriter (the conformance
// suite's fault proxy puts one listener in front of each endpoint). The
// client does not sync its endpoints from the cluster's member list, so
// every connection goes to the rewritten addresses.
func (o *URLOpener) RewriteStoreAddrs(u *url.URL, rewrite func(addr string) (string, error)) (*url.URL, error) {
	if o.Client.TLS != nil {
		return nil, fmt.Errorf("%w: a TLS endpoint's server name cannot be rewritten to another address", driver.ErrInvalid)
	}
	u2 := *u
	if err := fencelock.RewriteHostList(&u2, "2379", rewrite); err != nil {
		return nil, err
	}
	return &u2, nil
}

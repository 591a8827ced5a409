package redlock

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redisx"
)

// Scheme is the URL scheme this package registers with fencelock.Register.
const Scheme = "redlock"

func init() {
	fencelock.Register(Scheme, &URLOpener{})
}

// URLOpener opens redlock:// URLs:
//
//	redlock://[[user]:password@]host:port,host:port,host:port[/db][?param=value&...]
//
// listing an odd number (3 or more) of independent Redis primaries. The
// port defaults to 6379 (but Go's URL parser wants a port on the last of
// several hosts); the path is the database number on every primary
// (default 0); user and password apply to every primary. Query parameters,
// besides fencelock's own prefix, ttl and wait:
//
//	addr=host:port      one more primary; may repeat (for IPv6:
//	                    addr=[::1]:6379); addr=rediss://host:port connects
//	                    to that one with TLS
//	pool_size=N         connections per primary (go-redis default: 10 per CPU)
//	protocol=2|3        RESP version (default 2; go-redis's own default is 3):
//	                    as for redis:// (see package redis), the backend uses
//	                    nothing RESP3 adds, and go-redis checks for pending
//	                    RESP3 push messages before every reply it reads
//
// Each go-redis client it makes has ContextTimeoutEnabled set (the
// caller's ctx bounds every call), no retries (another primary's answer is
// the retry), and a ClientName unique to the fencelock Client
// ("fencelock-redlock-<hex>", used by KillSessions); they are closed with
// the fencelock Client.
type URLOpener struct {
	// TLSConfig, if not nil, makes every primary connect with TLS using a
	// clone of it (ServerName set to each host's name if empty). Hosts
	// given as addr=rediss://host:port use it too, or, if it is nil, the
	// system roots with the host's name.
	TLSConfig *tls.Config
	// Configure, if not nil, is called with each primary's go-redis
	// options (i is its index in URL order) before its client is made, for
	// what a URL cannot say: timeouts, a custom Dialer, credentials
	// providers, limits.
	Configure func(i int, o *goredis.Options)
}

// OpenBackendURL implements fencelock.URLOpener.
func (o *URLOpener) OpenBackendURL(_ context.Context, u *url.URL) (driver.Backend, error) {
	opts, err := o.options(u)
	if err != nil {
		return nil, err
	}
	clients := make([]*goredis.Client, len(opts))
	for i, ro := range opts {
		if o.Configure != nil {
			o.Configure(i, ro)
		}
		clients[i] = goredis.NewClient(ro)
	}
	return newBackend(clients, true), nil
}

// options turns u into one go-redis Options per primary, rejecting what it
// does not know.
func (o *URLOpener) options(u *url.URL) ([]*goredis.Options, error) {
	if u.Scheme != Scheme {
		return nil, fmt.Errorf("%w: scheme %q: use redlock://", driver.ErrInvalid, u.Scheme)
	}
	p, err := redisx.ParseURL(u)
	if err != nil {
		return nil, err
	}
	hosts := p.Hosts
	if err := checkCount(len(hosts)); err != nil {
		return nil, fmt.Errorf("%w (in %q)", err, u.Redacted())
	}
	var base goredis.Options
	base.ContextTimeoutEnabled = true
	base.MaxRetries = -1
	// A primary that refuses connections is down: say so at once rather
	// than after go-redis's default 5 dials 100ms apart.
	base.DialerRetries = 1
	base.DialerRetryTimeout = time.Millisecond
	// Redis OSS has no maintenance notifications: skip go-redis's attempt
	// to enable them on every new connection (a wasted round trip, and in
	// go-redis 9.23 the auto-mode fallback writes the shared options while
	// a Client.Conn reads them: a data race).
	base.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	base.ClientName = "fencelock-redlock-" + randHex(6)
	base.Username, base.Password, base.DB = p.Username, p.Password, p.DB
	base.Protocol, base.PoolSize = p.Protocol, p.PoolSize
	opts := make([]*goredis.Options, 0, len(hosts))
	var seen []string
	for _, h := range hosts {
		secure := o.TLSConfig != nil
		if rest, ok := strings.CutPrefix(h, "rediss://"); ok {
			h, secure = rest, true
		} else if rest, ok := strings.CutPrefix(h, "redis://"); ok {
			h = rest
		}
		h, host, err := redisx.HostPort(h, u)
		if err != nil {
			return nil, err
		}
		if slices.Contains(seen, h) {
			return nil, fmt.Errorf("%w: primary %s listed twice in %q: Redlock needs independent primaries", driver.ErrInvalid, h, u.Redacted())
		}
		seen = append(seen, h)
		ro := base
		ro.Addr = h
		ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		if secure {
			if o.TLSConfig != nil {
				ro.TLSConfig = o.TLSConfig.Clone()
				if ro.TLSConfig.ServerName == "" {
					ro.TLSConfig.ServerName = host
				}
			} else {
				ro.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
			}
		}
		opts = append(opts, &ro)
	}
	return opts, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RewriteStoreAddrs implements fencelock.AddrRewriter (the conformance
// suite's fault proxy puts one listener in front of each primary): the
// primaries in the URL's host list, then its addr= parameters, in order.
// TLS primaries are refused: their certificate names would not match.
func (o *URLOpener) RewriteStoreAddrs(u *url.URL, rewrite func(addr string) (string, error)) (*url.URL, error) {
	if o.TLSConfig != nil || strings.Contains(u.RawQuery, "rediss") {
		return nil, fmt.Errorf("%w: a TLS primary's server name cannot be rewritten to another address", driver.ErrInvalid)
	}
	u2 := *u
	if u2.Host != "" {
		if err := fencelock.RewriteHostList(&u2, "6379", rewrite); err != nil {
			return nil, err
		}
	}
	if err := fencelock.RewriteHostParams(&u2, "addr", "6379", rewrite); err != nil {
		return nil, err
	}
	return &u2, nil
}

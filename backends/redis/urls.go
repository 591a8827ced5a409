package redis

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redisx"
)

// The URL schemes this package registers with fencelock.Register.
const (
	Scheme    = "redis"  // plain TCP
	SchemeTLS = "rediss" // TLS
)

func init() {
	o := &URLOpener{}
	fencelock.Register(Scheme, o)
	fencelock.Register(SchemeTLS, o)
}

// URLOpener opens redis:// and rediss:// URLs:
//
//	redis://[[user]:password@]host[:port][,host[:port]...][/db][?param=value&...]
//
// The port defaults to 6379 (but Go's URL parser wants a port on the last
// of several hosts); the path is the database number (default 0).
// rediss:// connects with TLS. Query parameters, besides fencelock's own
// prefix, ttl and wait:
//
//	cluster=true    Redis Cluster (implied by several hosts)
//	addr=host:port  one more host; may repeat (for IPv6: addr=[::1]:7000)
//	pool_size=N     connections per server (go-redis default: 10 per CPU)
//	protocol=2|3    RESP version (default 2; go-redis's own default is 3)
//
// RESP2 by default: the backend uses nothing RESP3 adds (client-side
// caching, push notifications such as Redis Enterprise's maintenance
// notices), and go-redis checks for pending RESP3 push messages before
// every reply it reads, which costs a contended grant about 5% of its
// client CPU (and about as much throughput: measured with
// BenchmarkContended8Clients). protocol=3 restores go-redis's default.
// With RESP2, and unless Configure sets a Dialer, the client's connections
// also skip go-redis's health check (a MSG_PEEK recv before each command)
// while they were used within the last second, about as much again (see
// Pool health checks, atop dial.go): a connection the server closed in
// that second is found when a command on it reads EOF, and go-redis
// retries the command on another connection.
//
// The go-redis client it makes has ContextTimeoutEnabled set, so the
// caller's ctx bounds every call, and is closed with the fencelock Client.
// Its ClientName (shown by CLIENT LIST) is "fencelock-" and 12 random hex
// digits unless Configure sets one; KillSessions finds its connections by
// it. go-redis's own process-wide logger is left to the application (see
// LogGoRedisTo).
type URLOpener struct {
	// TLSConfig is used for rediss:// URLs. nil: the system roots, with the
	// first host's name as the server name. As in go-redis, one config
	// serves every node of a cluster: use a name all their certificates
	// carry, or check them in VerifyConnection.
	TLSConfig *tls.Config
	// Configure, if not nil, is called with the go-redis options parsed
	// from the URL before the client is made, for what a URL cannot say:
	// timeouts, a custom Dialer, credentials providers, limits.
	Configure func(*goredis.UniversalOptions)
}

// OpenBackendURL implements fencelock.URLOpener.
func (o *URLOpener) OpenBackendURL(_ context.Context, u *url.URL) (driver.Backend, error) {
	uo, err := o.options(u)
	if err != nil {
		return nil, err
	}
	if o.Configure != nil {
		o.Configure(uo)
	}
	if uo.ClientName == "" {
		uo.ClientName = "fencelock-" + randHex(6)
	}
	if uo.Dialer == nil && uo.Protocol == 2 {
		uo.Dialer = freshDialer(uo, freshFor) // see Pool health checks, atop dial.go
	}
	return newBackend(goredis.NewUniversalClient(uo), true), nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// options turns u into go-redis options, rejecting what it does not know.
func (o *URLOpener) options(u *url.URL) (*goredis.UniversalOptions, error) {
	if u.Scheme != Scheme && u.Scheme != SchemeTLS {
		return nil, fmt.Errorf("%w: scheme %q: use redis:// or rediss://", driver.ErrInvalid, u.Scheme)
	}
	p, err := redisx.ParseURL(u, "cluster")
	if err != nil {
		return nil, err
	}
	q := u.Query()
	uo := &goredis.UniversalOptions{ContextTimeoutEnabled: true, Protocol: p.Protocol, PoolSize: p.PoolSize,
		Username: p.Username, Password: p.Password, DB: p.DB,
		// A server that refuses connections is down: say so after one dial
		// per attempt rather than go-redis's default 5 dials 100 ms apart
		// (1.7 s for a refused port). Command retries (MaxRetries) still
		// ride out a restart.
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond}
	if len(p.Hosts) == 0 {
		return nil, fmt.Errorf("%w: URL %q names no host: use redis://host:6379", driver.ErrInvalid, u.Redacted())
	}
	for _, h := range p.Hosts {
		a, _, err := redisx.HostPort(h, u)
		if err != nil {
			return nil, err
		}
		uo.Addrs = append(uo.Addrs, a)
	}
	cluster := len(uo.Addrs) > 1
	if v := q.Get("cluster"); v != "" {
		c, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%w: cluster=%q: want true or false", driver.ErrInvalid, v)
		}
		if !c && cluster {
			return nil, fmt.Errorf("%w: several hosts with cluster=false: list one host, or use cluster=true for Redis Cluster (redlock:// is for independent primaries)", driver.ErrInvalid)
		}
		cluster = c
	}
	if cluster {
		uo.IsClusterMode = true
		if uo.DB != 0 {
			return nil, fmt.Errorf("%w: database %d with Redis Cluster, which has only database 0: drop the path", driver.ErrInvalid, uo.DB)
		}
	}
	if u.Scheme == SchemeTLS {
		if o.TLSConfig != nil {
			uo.TLSConfig = o.TLSConfig.Clone()
		} else {
			host, _, _ := net.SplitHostPort(uo.Addrs[0])
			uo.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
		}
	}
	return uo, nil
}

// RewriteStoreAddrs implements fencelock.AddrRewriter for one server's
// redis:// URL (the conformance suite's fault proxy uses it). Redis Cluster
// URLs are refused: the client learns the nodes' addresses from the
// servers (CLUSTER SLOTS), past any rewritten address; so are rediss://
// URLs, whose certificate names a rewritten address would not match.
func (o *URLOpener) RewriteStoreAddrs(u *url.URL, rewrite func(addr string) (string, error)) (*url.URL, error) {
	q := u.Query()
	switch {
	case u.Scheme != Scheme || o.TLSConfig != nil:
		return nil, fmt.Errorf("%w: a TLS URL's server names cannot be rewritten to another address", driver.ErrInvalid)
	case q.Get("cluster") == "true" || strings.Contains(u.Host, ",") || len(q["addr"]) > 0:
		return nil, fmt.Errorf("%w: Redis Cluster clients learn node addresses from the servers; they cannot be rewritten", driver.ErrInvalid)
	}
	u2 := *u
	if err := fencelock.RewriteHostList(&u2, "6379", rewrite); err != nil {
		return nil, err
	}
	return &u2, nil
}

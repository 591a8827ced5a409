package pgadvisory

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// The URL schemes this package registers with fencelock.Register.
const (
	Scheme    = "postgres"
	SchemeAlt = "postgresql"
)

func init() {
	o := &URLOpener{}
	fencelock.Register(Scheme, o)
	fencelock.Register(SchemeAlt, o)
}

// URLOpener opens postgres:// and postgresql:// URLs, which are pgx
// connection strings:
//
//	postgres://[user[:password]@]host[:port][,host[:port]...]/database[?param=value&...]
//
// Query parameters, besides fencelock's own prefix, ttl and wait:
//
//	fence_flush=false   Config.NoFenceFlush (default true)
//	label_app_name=true Config.LabelAppName (default false)
//	conn_timeout=5s     Config.ConnTimeout: longest wait for a pool connection
//	max_wait_conns=N    Config.MaxWaitConns: pool connections blocked Acquires may keep
//	pgx and pgxpool parameters: sslmode, sslrootcert, connect_timeout,
//	    target_session_attrs, pool_max_conns, pool_min_conns,
//	    default_query_exec_mode, ... (see pgconn.ParseConfig and
//	    pgxpool.ParseConfig)
//	PostgreSQL run-time parameters sent at connection start: application_name,
//	    options (e.g. options=-c%20search_path%3Dapp), search_path, timezone,
//	    client_encoding, datestyle, intervalstyle, statement_timeout,
//	    lock_timeout, idle_session_timeout, and extension settings (names
//	    with a dot)
//
// Any other parameter is rejected with ErrInvalid, so a typo (pool_max_con)
// fails at Open instead of being sent to the server as a run-time
// parameter. Open does not connect. The pool it makes is closed with the
// fencelock Client. PG* environment variables apply as in pgx.
type URLOpener struct {
	// Configure, if set, is called with the parsed pool configuration before
	// the pool is made: set TLS, auth hooks (BeforeConnect), tracers.
	Configure func(*pgxpool.Config) error
}

// runtimeParams are the PostgreSQL run-time parameters a URL may set.
var runtimeParams = []string{
	"application_name", "options", "search_path", "timezone", "client_encoding",
	"datestyle", "intervalstyle", "statement_timeout", "lock_timeout", "idle_session_timeout",
}

// OpenBackendURL implements fencelock.URLOpener.
func (o *URLOpener) OpenBackendURL(ctx context.Context, u *url.URL) (driver.Backend, error) {
	pc, cfg, err := o.config(u)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, storeErr(ctx, "make the connection pool", err)
	}
	return newBackend(pool, true, cfg), nil
}

// config parses u into a pool configuration and the backend's own
// settings, rejecting what neither we nor pgx know.
func (o *URLOpener) config(u *url.URL) (*pgxpool.Config, *Config, error) {
	if u.Scheme != Scheme && u.Scheme != SchemeAlt {
		return nil, nil, fmt.Errorf("%w: scheme %q: use postgres:// or postgresql://", driver.ErrInvalid, u.Scheme)
	}
	q := u.Query()
	for k, vs := range q {
		if len(vs) != 1 {
			return nil, nil, fmt.Errorf("%w: query parameter %q given %d times: give it once", driver.ErrInvalid, k, len(vs))
		}
	}
	cfg := &Config{}
	if v, ok := q["fence_flush"]; ok {
		on, err := strconv.ParseBool(v[0])
		if err != nil {
			return nil, nil, fmt.Errorf("%w: query parameter fence_flush=%q: want true or false", driver.ErrInvalid, v[0])
		}
		cfg.NoFenceFlush = !on
		q.Del("fence_flush")
	}
	if v, ok := q["label_app_name"]; ok {
		on, err := strconv.ParseBool(v[0])
		if err != nil {
			return nil, nil, fmt.Errorf("%w: query parameter label_app_name=%q: want true or false", driver.ErrInvalid, v[0])
		}
		cfg.LabelAppName = on
		q.Del("label_app_name")
	}
	if v, ok := q["conn_timeout"]; ok {
		d, err := time.ParseDuration(v[0])
		if err != nil || d <= 0 {
			return nil, nil, fmt.Errorf("%w: query parameter conn_timeout=%q: want a positive Go duration such as 2s", driver.ErrInvalid, v[0])
		}
		cfg.ConnTimeout = d
		q.Del("conn_timeout")
	}
	if v, ok := q["max_wait_conns"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n <= 0 {
			return nil, nil, fmt.Errorf("%w: query parameter max_wait_conns=%q: want a positive integer", driver.ErrInvalid, v[0])
		}
		cfg.MaxWaitConns = n
		q.Del("max_wait_conns")
	}
	u2 := *u
	u2.RawQuery = q.Encode()
	pc, err := pgxpool.ParseConfig(u2.String())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", driver.ErrInvalid, err) // pgx redacts the password
	}
	// pgx passes every key it does not know to the server as a run-time
	// parameter; accept only real ones.
	var bad []string
	for k := range q {
		if _, rt := pc.ConnConfig.RuntimeParams[k]; rt && !slices.Contains(runtimeParams, k) && !strings.Contains(k, ".") {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return nil, nil, fmt.Errorf("%w: unknown query parameter(s) %s: not a fencelock (prefix, ttl, wait, fence_flush, label_app_name, conn_timeout, max_wait_conns), pgx or pgxpool parameter, nor a run-time parameter passed through (%s); set other server settings with options=-c name=value",
			driver.ErrInvalid, strings.Join(bad, ", "), strings.Join(runtimeParams, ", "))
	}
	if o.Configure != nil {
		if err := o.Configure(pc); err != nil {
			return nil, nil, err
		}
	}
	return pc, cfg, nil
}

// RewriteStoreAddrs implements fencelock.AddrRewriter (the conformance
// suite's fault proxy puts one listener in front of each host of the
// URL's authority). Hosts given as host=, hostaddr= or port= parameters,
// Unix sockets, and sslmode=verify-full (the certificate names the host)
// are refused.
func (o *URLOpener) RewriteStoreAddrs(u *url.URL, rewrite func(addr string) (string, error)) (*url.URL, error) {
	q := u.Query()
	for _, k := range []string{"host", "hostaddr", "port"} {
		if q.Has(k) {
			return nil, fmt.Errorf("%w: a URL with the %s= parameter cannot be rewritten; name the host in the authority", driver.ErrInvalid, k)
		}
	}
	if q.Get("sslmode") == "verify-full" {
		return nil, fmt.Errorf("%w: sslmode=verify-full checks the server's name, which a rewritten address would not match", driver.ErrInvalid)
	}
	u2 := *u
	if err := fencelock.RewriteHostList(&u2, "5432", rewrite); err != nil {
		return nil, err
	}
	return &u2, nil
}

package redisx

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// URL is what the redis:// and redlock:// schemes read the same way.
type URL struct {
	// Hosts are the authority's comma-separated hosts, then the addr=
	// parameters, as written (see HostPort).
	Hosts              []string
	Username, Password string
	DB                 int // the path: /0 when none
	Protocol           int // the RESP version: 2 unless protocol=3
	PoolSize           int // pool_size; 0: go-redis's default
}

// ParseURL reads u's hosts, user info, database path and its addr,
// protocol and pool_size parameters; the parameters named in extra are
// the caller's to read. Unknown parameters, and any parameter but addr
// given more than once, are errors wrapping ErrInvalid.
func ParseURL(u *url.URL, extra ...string) (URL, error) {
	q := u.Query()
	if err := fencelock.UnknownParams(q, append([]string{"addr", "pool_size", "protocol"}, extra...)...); err != nil {
		return URL{}, err
	}
	for k, vs := range q {
		if k != "addr" && len(vs) != 1 {
			return URL{}, fmt.Errorf("%w: query parameter %q given %d times: give it once", driver.ErrInvalid, k, len(vs))
		}
	}
	p := URL{Protocol: 2}
	if u.Host != "" {
		p.Hosts = strings.Split(u.Host, ",")
	}
	p.Hosts = append(p.Hosts, q["addr"]...)
	if u.User != nil {
		p.Username = u.User.Username()
		p.Password, _ = u.User.Password()
	}
	if s := strings.Trim(u.Path, "/"); s != "" {
		db, err := strconv.Atoi(s)
		if err != nil || db < 0 {
			return URL{}, fmt.Errorf("%w: database %q in %q: want a number such as /0", driver.ErrInvalid, s, u.Redacted())
		}
		p.DB = db
	}
	if v := q.Get("protocol"); v != "" {
		if v != "2" && v != "3" {
			return URL{}, fmt.Errorf("%w: protocol=%q: want 2 or 3 (the RESP version)", driver.ErrInvalid, v)
		}
		p.Protocol = int(v[0] - '0')
	}
	if v := q.Get("pool_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return URL{}, fmt.Errorf("%w: pool_size=%q: want a positive integer", driver.ErrInvalid, v)
		}
		p.PoolSize = n
	}
	return p, nil
}

// HostPort returns h as host:port, with Redis's port 6379 where h names
// none, and its host; an empty or malformed h is an error wrapping
// ErrInvalid that quotes u (redacted).
func HostPort(h string, u *url.URL) (addr, host string, err error) {
	if h == "" {
		return "", "", fmt.Errorf("%w: empty host in %q", driver.ErrInvalid, u.Redacted())
	}
	if _, _, err := net.SplitHostPort(h); err != nil {
		h = net.JoinHostPort(strings.Trim(h, "[]"), "6379")
	}
	host, port, err := net.SplitHostPort(h)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n <= 0 || n > 65535 {
		return "", "", fmt.Errorf("%w: bad host %q in %q: want host:port", driver.ErrInvalid, h, u.Redacted())
	}
	return h, host, nil
}

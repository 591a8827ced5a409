package fencelock

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// AddrRewriter is an optional interface of a URLOpener whose URLs name the
// store's network addresses. The conformance suite's URL harness uses it to
// put a fault proxy between one client and the store (one listener per
// store address), so that `fencelock conformance --url` can cut, reset
// and slow that client's connections.
type AddrRewriter interface {
	// RewriteStoreAddrs returns a copy of u in which every network address
	// of the store (host:port, with the scheme's default port filled in
	// where u omits it) is replaced by rewrite(addr), called in the order
	// u lists them. It returns an error wrapping ErrInvalid for a URL whose
	// addresses cannot be rewritten (a Unix socket, a service that a TLS
	// name must match).
	RewriteStoreAddrs(u *url.URL, rewrite func(addr string) (string, error)) (*url.URL, error)
}

// RewriteStoreAddrs is the default mux's RewriteStoreAddrs.
func RewriteStoreAddrs(rawURL string, rewrite func(addr string) (string, error)) (string, error) {
	return defaultMux.RewriteStoreAddrs(rawURL, rewrite)
}

// RewriteStoreAddrs returns rawURL with every store address replaced by
// rewrite(addr), through the scheme's opener (see AddrRewriter). It returns
// an error wrapping ErrInvalid if the URL is malformed, its scheme is not
// registered, or its opener cannot rewrite addresses.
func (m *URLMux) RewriteStoreAddrs(rawURL string, rewrite func(addr string) (string, error)) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("%w: malformed URL %q", ErrInvalid, redactRaw(rawURL))
	}
	m.mu.RLock()
	opener := m.openers[u.Scheme]
	m.mu.RUnlock()
	if opener == nil {
		return "", fmt.Errorf("%w: no backend registered for scheme %q (registered: %s)", ErrInvalid, u.Scheme, m.schemeList())
	}
	ar, ok := opener.(AddrRewriter)
	if !ok {
		return "", fmt.Errorf("%w: the %s:// opener cannot rewrite its store addresses (it does not implement fencelock.AddrRewriter)", ErrInvalid, u.Scheme)
	}
	u2, err := ar.RewriteStoreAddrs(u, rewrite)
	if err != nil {
		return "", err
	}
	return u2.String(), nil
}

// RewriteHostList is a helper for an AddrRewriter whose URL authority is a
// comma-separated list of host[:port] (redis://h:6379, etcd://h1,h2:2379):
// it replaces u.Host in place, filling in defaultPort where a host has
// none.
func RewriteHostList(u *url.URL, defaultPort string, rewrite func(addr string) (string, error)) error {
	if u.Host == "" {
		return fmt.Errorf("%w: URL %q names no host", ErrInvalid, u.Redacted())
	}
	hosts := strings.Split(u.Host, ",")
	for i, h := range hosts {
		addr, err := withPort(h, defaultPort)
		if err != nil {
			return fmt.Errorf("%w: host %q in %q: %v", ErrInvalid, h, u.Redacted(), err)
		}
		if hosts[i], err = rewrite(addr); err != nil {
			return err
		}
	}
	u.Host = strings.Join(hosts, ",")
	return nil
}

// RewriteAddrParam is a helper for an AddrRewriter whose URL names a store
// address in a query parameter holding a URL (endpoint=http://h:8000): it
// rewrites that URL's host in place (defaultPort where it has none) and
// reports whether the parameter was present.
func RewriteAddrParam(u *url.URL, param, defaultPort string, rewrite func(addr string) (string, error)) (bool, error) {
	q := u.Query()
	v := q.Get(param)
	if v == "" {
		return false, nil
	}
	pu, err := url.Parse(v)
	if err != nil || pu.Host == "" {
		return true, fmt.Errorf("%w: query parameter %s=%q is not a URL with a host", ErrInvalid, param, v)
	}
	addr, err := withPort(pu.Host, defaultPort)
	if err != nil {
		return true, fmt.Errorf("%w: query parameter %s=%q: %v", ErrInvalid, param, v, err)
	}
	if pu.Host, err = rewrite(addr); err != nil {
		return true, err
	}
	q.Set(param, pu.String())
	u.RawQuery = q.Encode()
	return true, nil
}

// withPort returns h as host:port, with defaultPort if h has no port.
func withPort(h, defaultPort string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("empty host")
	}
	if host, port, err := net.SplitHostPort(h); err == nil {
		if host == "" || port == "" {
			return "", fmt.Errorf("want host:port")
		}
		return h, nil
	}
	host := strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if defaultPort == "" {
		return "", fmt.Errorf("no port, and the scheme has no default")
	}
	return net.JoinHostPort(host, defaultPort), nil
}

// RewriteHostParams is a helper for an AddrRewriter whose URL may list more
// hosts in a repeated query parameter (addr=h:6379&addr=h2): it rewrites
// every value of param in place, each a host[:port] (defaultPort where it
// has none) that may carry a scheme:// prefix, which is kept.
func RewriteHostParams(u *url.URL, param, defaultPort string, rewrite func(addr string) (string, error)) error {
	q := u.Query()
	vs := q[param]
	if len(vs) == 0 {
		return nil
	}
	for i, v := range vs {
		scheme, h, ok := strings.Cut(v, "://")
		if !ok {
			scheme, h = "", v
		}
		addr, err := withPort(h, defaultPort)
		if err != nil {
			return fmt.Errorf("%w: query parameter %s=%q: %v", ErrInvalid, param, v, err)
		}
		if addr, err = rewrite(addr); err != nil {
			return err
		}
		if scheme != "" {
			addr = scheme + "://" + addr
		}
		vs[i] = addr
	}
	q[param] = vs
	u.RawQuery = q.Encode()
	return nil
}

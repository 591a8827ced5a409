package fencelock

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// URLOpener opens a backend from a URL. Backend packages register one per
// scheme in init (see Register). The URL's mux-level query parameters
// (prefix, ttl, wait) have been removed and applied by the mux; the opener
// must reject any parameter it does not know with ErrInvalid.
type URLOpener interface {
	OpenBackendURL(ctx context.Context, u *url.URL) (driver.Backend, error)
}

// URLOpenerFunc adapts a function to URLOpener.
type URLOpenerFunc func(ctx context.Context, u *url.URL) (driver.Backend, error)

// OpenBackendURL calls f.
func (f URLOpenerFunc) OpenBackendURL(ctx context.Context, u *url.URL) (driver.Backend, error) {
	return f(ctx, u)
}

// URLMux maps URL schemes to openers. The zero value is empty and usable.
type URLMux struct {
	mu      sync.RWMutex
	openers map[string]URLOpener
}

// Register makes opener handle scheme. It panics if scheme is already
// registered or empty (a programming error, as with database/sql).
func (m *URLMux) Register(scheme string, opener URLOpener) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if scheme == "" || opener == nil {
		panic("fencelock: Register with an empty scheme or nil opener")
	}
	if m.openers == nil {
		m.openers = map[string]URLOpener{}
	}
	if _, dup := m.openers[scheme]; dup {
		panic("fencelock: scheme " + scheme + " registered twice")
	}
	m.openers[scheme] = opener
}

// Schemes returns the registered schemes, sorted.
func (m *URLMux) Schemes() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := make([]string, 0, len(m.openers))
	for k := range m.openers {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// mux-level query parameters, applied to Options by every scheme.
var muxParams = map[string]func(o *Options, v string) error{
	"prefix": func(o *Options, v string) error { o.Prefix = v; return nil },
	"ttl": func(o *Options, v string) error {
		d, err := parsePositiveDuration("ttl", v)
		o.DefaultTTL = d
		return err
	},
	"wait": func(o *Options, v string) error {
		d, err := parsePositiveDuration("wait", v)
		o.DefaultWait = d
		return err
	},
}

func parsePositiveDuration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%w: query parameter %s=%q: want a positive Go duration such as 10s or 500ms", ErrInvalid, name, v)
	}
	return d, nil
}

// Open opens a Client for the URL, using opts as the base options (nil for
// defaults); the URL's prefix, ttl and wait parameters override them.
func (m *URLMux) Open(ctx context.Context, rawURL string, opts *Options) (*Client, error) {
	const op = "open"
	u, err := url.Parse(rawURL)
	if err != nil {
		// The parse error quotes the URL: say neither, it may hold a password.
		return nil, &Error{Op: op, Err: fmt.Errorf("%w: malformed URL %q; want scheme://..., e.g. redis://127.0.0.1:6379/0 (registered schemes: %s)", ErrInvalid, redactRaw(rawURL), m.schemeList())}
	}
	if u.Scheme == "" {
		return nil, &Error{Op: op, Err: fmt.Errorf("%w: URL %q has no scheme: use one of %s", ErrInvalid, u.Redacted(), m.schemeList())}
	}
	m.mu.RLock()
	opener := m.openers[u.Scheme]
	m.mu.RUnlock()
	if opener == nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("%w: no backend registered for scheme %q (registered: %s); forgotten import? e.g. import _ \"github.com/fencelock/fencelock/backends/...\"", ErrInvalid, u.Scheme, m.schemeList())}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("%w: malformed query in %q: %v", ErrInvalid, u.Redacted(), err)}
	}
	for k, vs := range q {
		set, ok := muxParams[k]
		if !ok {
			continue
		}
		if len(vs) != 1 {
			return nil, &Error{Op: op, Err: fmt.Errorf("%w: query parameter %q given %d times: give it once", ErrInvalid, k, len(vs))}
		}
		if err := set(&o, vs[0]); err != nil {
			return nil, &Error{Op: op, Err: err}
		}
		q.Del(k)
	}
	u2 := *u
	u2.RawQuery = q.Encode()
	b, err := opener.OpenBackendURL(ctx, &u2)
	if err != nil {
		return nil, &Error{Op: op, Backend: u.Scheme, Err: err}
	}
	if q := u.Query().Get("ttl"); q != "" {
		// A ttl the store cannot honour would fail every Acquire: say so now.
		caps := b.Capabilities()
		if min := caps.MinTTL; o.DefaultTTL < min {
			_ = b.Close()
			return nil, &Error{Op: op, Backend: caps.Backend, Err: fmt.Errorf("%w: query parameter ttl=%s is below the %s backend's minimum TTL %v: use ttl=%v or more", ErrInvalid, q, caps.Backend, min, min)}
		}
		if o.DefaultTTL > MaxTTL {
			_ = b.Close()
			return nil, &Error{Op: op, Backend: caps.Backend, Err: fmt.Errorf("%w: query parameter ttl=%s is over the %v maximum", ErrInvalid, q, MaxTTL)}
		}
	}
	return New(b, &o), nil
}

// RedactURL returns rawURL with any password replaced by "xxxxx", for
// logs and messages; it never fails, even on a URL that does not parse.
func RedactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return redactRaw(rawURL)
	}
	if _, has := u.User.Password(); !has {
		return rawURL
	}
	return u.Redacted()
}

// redactRaw hides the userinfo of a URL that did not parse.
func redactRaw(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if j := strings.LastIndex(rest, "@"); j >= 0 {
			return raw[:i+3] + "xxxxx@" + rest[j+1:]
		}
	}
	return raw
}

func (m *URLMux) schemeList() string {
	s := m.Schemes()
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

var defaultMux = &URLMux{}

// DefaultURLMux returns the mux that backend packages register with in init.
func DefaultURLMux() *URLMux { return defaultMux }

// Register registers opener for scheme on DefaultURLMux.
func Register(scheme string, opener URLOpener) { defaultMux.Register(scheme, opener) }

// Schemes returns the schemes registered on DefaultURLMux.
func Schemes() []string { return defaultMux.Schemes() }

// Open opens a Client by URL on DefaultURLMux, for example "mem://",
// "redis://127.0.0.1:6379/0" or "etcd://127.0.0.1:2379/locks". Import the
// backend packages you want (blank imports suffice). Query parameters
// prefix, ttl and wait set Options.Prefix, DefaultTTL and DefaultWait for
// every scheme; the others are the backend's, and unknown ones are rejected.
func Open(ctx context.Context, rawURL string) (*Client, error) {
	return defaultMux.Open(ctx, rawURL, nil)
}

// UnknownParams returns an ErrInvalid error naming the query parameters of q
// that are not in known, or nil. Backend URL openers use it.
func UnknownParams(q url.Values, known ...string) error {
	var bad []string
	for k := range q {
		if !slices.Contains(known, k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	all := append(slices.Clone(known), "prefix", "ttl", "wait")
	slices.Sort(all)
	return fmt.Errorf("%w: unknown query parameter(s) %s: known are %s", ErrInvalid, strings.Join(bad, ", "), strings.Join(all, ", "))
}

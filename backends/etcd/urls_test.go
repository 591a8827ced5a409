package etcd

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

func TestOpenURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		eps     []string
		prefix  string
		timeout time.Duration
		bad     bool
	}{
		{url: "etcd://127.0.0.1:2379", eps: []string{"127.0.0.1:2379"}, timeout: DefaultRequestTimeout},
		{url: "etcd://h1:2379,h2,h3:2381/locks", eps: []string{"h1:2379", "h2:2379", "h3:2381"}, prefix: "locks/", timeout: DefaultRequestTimeout},
		{url: "etcd://h1/a/b/?request_timeout=2s", eps: []string{"h1:2379"}, prefix: "a/b/", timeout: 2 * time.Second},
		{url: "etcd://h1/", eps: []string{"h1:2379"}, timeout: DefaultRequestTimeout},
		{url: "etcd://[::1]:2379/x", eps: []string{"[::1]:2379"}, prefix: "x/", timeout: DefaultRequestTimeout},
		{url: "etcd://h1/?request_timeout=soon", bad: true},
		{url: "etcd://h1/?request_timeout=-1s", bad: true},
		{url: "etcd://h1/?foo=1", bad: true},
		{url: "etcd:///locks", bad: true},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		cc, cfg, err := (&URLOpener{}).parse(u) // OpenBackendURL = parse + probe
		if tc.bad {
			if !errors.Is(err, fencelock.ErrInvalid) {
				t.Errorf("%s: got %v, want ErrInvalid", tc.url, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if !slices.Equal(cc.Endpoints, tc.eps) || cfg.KeyPrefix != tc.prefix || cfg.RequestTimeout != tc.timeout {
			t.Errorf("%s: endpoints %v prefix %q timeout %v; want %v %q %v", tc.url, cc.Endpoints, cfg.KeyPrefix, cfg.RequestTimeout, tc.eps, tc.prefix, tc.timeout)
		}
	}
}

// TestOpenMuxParams: the mux-level parameters pass through to the Client;
// an unknown parameter is rejected with ErrInvalid before any I/O.
func TestOpenMuxParams(t *testing.T) {
	srv := sharedEtcd(t, 1)
	c, err := fencelock.Open(t.Context(), srv.URL("muxparams")+"?ttl=3s&wait=2s&request_timeout=4s&prefix=p-")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Capabilities().Backend != "etcd" {
		t.Fatalf("backend %q", c.Capabilities().Backend)
	}
	l, err := c.TryAcquire(t.Context(), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	if d := time.Until(l.ValidUntil()); d > 3*time.Second || d < 2*time.Second {
		t.Errorf("lease valid for %v with ?ttl=3s", d)
	}
	_, err = fencelock.Open(t.Context(), srv.URL("x")+"?colour=red")
	if !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("unknown parameter: %v, want ErrInvalid", err)
	}
}

// TestUnavailable: Open probes the cluster (for its minimum TTL), so a
// cluster that does not answer fails Open with ErrUnavailable within the
// request timeout, saying it cannot reach it; a caller's deadline that
// ends first stays visible.
func TestUnavailable(t *testing.T) {
	start := time.Now()
	_, err := fencelock.Open(t.Context(), "etcd://127.0.0.1:1/x?request_timeout=300ms")
	if !errors.Is(err, fencelock.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach etcd at 127.0.0.1:1") {
		t.Fatalf("Open of a dead endpoint: %v, want ErrUnavailable saying it cannot reach it", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v with a 300ms request timeout", took)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = fencelock.Open(ctx, "etcd://127.0.0.1:1/x")
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Open with a deadline on a dead endpoint: %v, want ErrUnavailable (the refused connection, before the deadline)", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %v with a 100ms deadline", took)
	}
}

package redis_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redis"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/adminhook"
	"github.com/fencelock/fencelock/internal/testserver"
)

// harness runs the suite on one real server or cluster, shared by the
// checks of a test (each check uses its own random key prefix). Every
// client is opened from the URL, so it owns its go-redis client, with a
// dialer the harness can cut to partition that client from the store
// (KillSession).
type harness struct {
	url     string // opens the same store from another process
	addrs   []string
	cluster bool

	mu    sync.Mutex
	cuts  map[*fencelock.Client]*partition
	admin goredis.UniversalClient
	adm   *fencelock.Client // whose driver.Admin Admin returns
}

var (
	_ conformance.Expirer       = (*harness)(nil)
	_ conformance.SessionKiller = (*harness)(nil)
	_ conformance.Partitioner   = (*harness)(nil)
	_ conformance.Administered  = (*harness)(nil)
)

// newHarness returns a HarnessMaker over the store at rawURL.
func newHarness(t testing.TB, rawURL string) conformance.HarnessMaker {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	addrs := strings.Split(u.Host, ",")
	cluster := u.Query().Get("cluster") == "true" || len(addrs) > 1
	return func(ctx context.Context, t testing.TB) (conformance.Harness, error) {
		return &harness{url: rawURL, addrs: addrs, cluster: cluster, cuts: map[*fencelock.Client]*partition{}}, nil
	}
}

func (h *harness) MakeClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	p := &partition{conns: map[net.Conn]struct{}{}}
	var mux fencelock.URLMux
	mux.Register(redis.Scheme, &redis.URLOpener{Configure: func(o *goredis.UniversalOptions) { o.Dialer = p.dial }})
	c, err := mux.Open(ctx, h.url, opts)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.cuts[c] = p
	h.mu.Unlock()
	return c, nil
}

func (h *harness) URL() string { return h.url }

func (h *harness) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.admin != nil {
		_ = h.admin.Close()
	}
	if h.adm != nil {
		_ = h.adm.Close()
	}
}

// PartitionedClient: a client behind the suite's fault proxies (one
// server; a cluster's node addresses cannot be proxied, so the partition
// checks skip there).
func (h *harness) PartitionedClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, *conformance.Faults, error) {
	u, f, err := conformance.ProxyURL(h.url)
	if err != nil {
		return nil, nil, err
	}
	c, err := fencelock.DefaultURLMux().Open(ctx, u, opts)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return c, f, nil
}

// Admin: the backend's own admin hooks, from a client of the harness's.
func (h *harness) Admin() driver.Admin {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.adm == nil {
		c, err := fencelock.Open(context.Background(), h.url)
		if err != nil {
			return nil
		}
		h.adm = c
	}
	adm, ok := adminhook.Of(h.adm)
	if !ok {
		return nil
	}
	return adm
}

// Expire deletes the lock key behind the holder's back, as its TTL would.
func (h *harness) Expire(ctx context.Context, key string) error {
	h.mu.Lock()
	if h.admin == nil {
		h.admin = goredis.NewUniversalClient(&goredis.UniversalOptions{Addrs: h.addrs, IsClusterMode: h.cluster})
	}
	admin := h.admin
	h.mu.Unlock()
	n, err := admin.Del(ctx, key).Result()
	if err == nil && n != 1 {
		err = errors.New("lock key " + key + " was not there")
	}
	return err
}

// KillSession partitions c from the store: its connections are cut and
// new ones refused, as a network fault would. Redis has no session, so the
// store drops c's leases when their TTL runs out.
func (h *harness) KillSession(_ context.Context, c *fencelock.Client) error {
	h.mu.Lock()
	p := h.cuts[c]
	h.mu.Unlock()
	if p == nil {
		return errors.New("client not made by this harness")
	}
	p.cut()
	return nil
}

// partition is a dialer that can be cut.
type partition struct {
	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

var errPartitioned = errors.New("test network partition")

func (p *partition) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errPartitioned}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		c.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Err: errPartitioned}
	}
	p.conns[c] = struct{}{}
	return c, nil
}

func (p *partition) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
}

func TestConformance(t *testing.T) {
	r := testserver.StartRedis(t)
	conformance.RunConformanceTests(t, newHarness(t, r.URL()))
}

// TestConformanceByURL runs the suite as `fencelock conformance --url`
// does: clients opened from the URL alone, the loss hooks from the
// backend's driver.Admin (DEL, CLIENT KILL). Nothing may be skipped.
func TestConformanceByURL(t *testing.T) {
	r := testserver.StartRedis(t)
	conformance.RunConformanceTests(t, conformance.URLHarness(r.URL()))
}

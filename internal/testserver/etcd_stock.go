package testserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// StockEtcd is a single-member etcd run from the installed `etcd` binary
// (Debian's etcd-server, 3.4.23 here) with etcd's DEFAULT timing: no
// --heartbeat-interval or --election-timeout flags, so 100 ms and 1000 ms,
// which makes etcd raise any lease TTL below 2 s to 2 s. fsync stays on.
// It is what a user's stock server does, unlike the embedded, tuned
// members of EtcdCluster.
type StockEtcd struct {
	*Proc
	// Endpoint is host:port of the client URL.
	Endpoint string
}

// URL returns an etcd:// URL for the server with key prefix prefix (may be
// empty).
func (e *StockEtcd) URL(prefix string) string {
	u := "etcd://" + e.Endpoint
	if prefix != "" {
		u += "/" + strings.Trim(prefix, "/")
	}
	return u
}

// StartStockEtcd starts a StockEtcd for tb in a temp dir and kills it at
// cleanup. A missing etcd binary skips tb (fails it under CI=true).
func StartStockEtcd(tb testing.TB) *StockEtcd {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := NewStockEtcd(ctx, tb.TempDir())
	if err != nil {
		Unavailable(tb, "stock etcd", err)
	}
	tb.Cleanup(func() { _ = e.Kill() })
	return e
}

// NewStockEtcd starts a StockEtcd with its data under dir, without package
// testing; the caller calls Kill.
func NewStockEtcd(ctx context.Context, dir string) (*StockEtcd, error) {
	bin, err := LookPath("etcd", "/usr/bin/etcd")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := range 3 { // a port can be taken between FreePort and listen
		e, err := startStockEtcd(ctx, bin, filepath.Join(dir, fmt.Sprintf("stock%d", attempt)))
		if err == nil {
			return e, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startStockEtcd(ctx context.Context, bin, dir string) (*StockEtcd, error) {
	cport, err := FreePort()
	if err != nil {
		return nil, err
	}
	pport, err := FreePort()
	if err != nil {
		return nil, err
	}
	client, peer := "http://"+Addr(cport), "http://"+Addr(pport)
	p := &Proc{
		Name: "etcd (stock) " + Addr(cport),
		Path: bin,
		Args: []string{
			"--name", "stock", "--data-dir", dir,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "stock=" + peer, "--initial-cluster-state", "new",
			"--logger", "zap", "--log-level", "warn",
		},
		// etcd 3.4 refuses to start on arm64 without this.
		Env: []string{"ETCD_UNSUPPORTED_ARCH=" + runtime.GOARCH},
	}
	health := client + "/health"
	p.Ready = func(ctx context.Context) error { return etcdHealthy(ctx, health) }
	if err := p.Start(ctx); err != nil {
		return nil, err
	}
	return &StockEtcd{Proc: p, Endpoint: Addr(cport)}, nil
}

// etcdHealthy asks an etcd client URL's /health endpoint.
func etcdHealthy(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("etcd /health: %s %s", resp.Status, body)
	}
	return nil
}

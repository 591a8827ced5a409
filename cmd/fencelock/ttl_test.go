package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestURLTTLBelowMinTTLRejected: a ttl query parameter below the backend's
// MinTTL fails every command at Open, naming the minimum, before any lock
// is tried: on redis (MinTTL 10ms; nothing listens, so only Open can have
// answered) and on a stock etcd, whose 2 s minimum Open probes.
func TestURLTTLBelowMinTTLRejected(t *testing.T) {
	etcd := testserver.StartStockEtcd(t)
	for _, tc := range []struct{ url, min string }{
		{"redis://127.0.0.1:1/0?ttl=5ms", "10ms"},
		{etcd.URL("cli") + "?ttl=1s", "2s"},
	} {
		for name, run := range map[string]func(context.Context, []string) error{
			"demo":        runDemo,
			"bench":       runBench,
			"lostupdates": runLostUpdates,
		} {
			start := time.Now()
			_, err := capture(t, func() error { return run(t.Context(), []string{"--url", tc.url}) })
			if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), "minimum TTL "+tc.min) {
				t.Fatalf("%s --url %s: %v, want ErrInvalid naming the minimum %s", name, tc.url, err, tc.min)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("%s --url %s took %v to refuse", name, tc.url, took)
			}
		}
	}
	// At the minimum it opens.
	c, err := fencelock.Open(t.Context(), etcd.URL("cli")+"?ttl=2s")
	if err != nil {
		t.Fatalf("ttl=2s on a stock etcd: %v", err)
	}
	_ = c.Close()
}

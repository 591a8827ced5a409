package zookeeper_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/zookeeper"
)

// TestNewRejectsBadConfig: New reports a nil config, no servers or a
// negative duration as ErrInvalid, before it dials.
func TestNewRejectsBadConfig(t *testing.T) {
	srv := []string{"127.0.0.1:1"} // never dialled: New rejects the config first
	for _, tc := range []struct {
		what string
		cfg  *zookeeper.Config
	}{
		{"nil config", nil},
		{"no servers", &zookeeper.Config{Root: "/locks"}},
		{"negative SessionTimeout", &zookeeper.Config{Servers: srv, SessionTimeout: -time.Second}},
		{"negative RequestTimeout", &zookeeper.Config{Servers: srv, RequestTimeout: -time.Second}},
	} {
		if c, err := zookeeper.New(t.Context(), tc.cfg, nil); c != nil || !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("%s: %v, %v; want nil, ErrInvalid", tc.what, c, err)
		}
	}
}

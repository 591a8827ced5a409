package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestConfigErrorsAreInvalid: primaries that refuse the connection's
// set-up (a wrong password, none where one is required, a database number
// they do not have) answer before any command runs, so the error is
// ErrInvalid, never ErrIndeterminate, and quotes no password. (The
// classes are the redis backend's: both read go-redis errors through
// internal/redisx.)
func TestConfigErrorsAreInvalid(t *testing.T) {
	m := testserver.StartRedisNodes(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range m.Nodes {
		if _, err := n.Do(ctx, "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
			t.Fatal(err)
		}
	}
	hosts := strings.Join(m.Addrs(), ",")
	for _, tc := range []struct{ what, url string }{
		{"wrong password", "redlock://:wrong@" + hosts + "/0"},
		{"missing password", "redlock://" + hosts + "/0"},
		{"database out of range", "redlock://:s3cret@" + hosts + "/99"},
	} {
		c, err := fencelock.Open(ctx, tc.url)
		if err == nil {
			_, err = c.TryAcquire(ctx, "x", &fencelock.AcquireOptions{TTL: 15 * time.Second})
			_ = c.Close()
		}
		if !errors.Is(err, fencelock.ErrInvalid) || errors.Is(err, fencelock.ErrIndeterminate) {
			t.Errorf("%s: got %v, want ErrInvalid", tc.what, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "wrong@") {
			t.Errorf("%s: the error quotes the password: %v", tc.what, err)
		}
	}
	c, err := fencelock.Open(ctx, "redlock://:s3cret@"+hosts+"/0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "x", nil)
	if err != nil {
		t.Fatalf("the right password: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestConfigErrorsAreInvalid: a server that refuses the connection's
// set-up — a wrong password, none where one is required, a database
// number it does not have — answers before any command runs, so the
// error is ErrInvalid (a configuration error), never ErrIndeterminate,
// and says nothing about a lock staying held.
func TestConfigErrorsAreInvalid(t *testing.T) {
	r := testserver.StartRedisProcess(t)
	addr := r.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.Do(ctx, "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, url string }{
		{"wrong password", "redis://:wrong@" + addr + "/0"},
		{"missing password", "redis://" + addr + "/0"},
		{"database out of range", "redis://:s3cret@" + addr + "/99"},
	} {
		c, err := fencelock.Open(ctx, tc.url)
		if err == nil {
			_, err = c.TryAcquire(ctx, "x", &fencelock.AcquireOptions{TTL: 15 * time.Second})
			_ = c.Close()
		}
		if !errors.Is(err, fencelock.ErrInvalid) || errors.Is(err, fencelock.ErrIndeterminate) || strings.Contains(err.Error(), "may stay held") {
			t.Errorf("%s: got %v, want ErrInvalid and no word of a lock held", tc.what, err)
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "wrong@") {
			t.Errorf("%s: the error quotes the password: %v", tc.what, err)
		}
	}
	c, err := fencelock.Open(ctx, "redis://:s3cret@"+addr+"/0")
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

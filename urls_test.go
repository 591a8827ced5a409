package fencelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
)

func TestOpenInvalidURLs(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		url  string
		want string // in the message
	}{
		{"nosuch://x", "forgotten import"},
		{"nosuch://x", "mem"}, // lists the registered schemes
		{"mem://?bogus=1", "unknown query parameter"},
		{"mem://?ttl=abc", "positive Go duration"},
		{"mem://?ttl=-1s", "positive Go duration"},
		{"mem://?wait=0s", "positive Go duration"},
		{"mem://?ttl=1s&ttl=2s", "give it once"},
		{"mem://?ttl=500us", "below the mem backend's minimum TTL"},
		{"mem://?ttl=9000h", "over the"},
		{"://bad", "malformed URL"},
		{"127.0.0.1:6379", "scheme"},
		{"", "no scheme"},
		{"mem://name:123", "mem://NAME"},
		{"memrpc://", "memrpc://HOST:PORT"},
	}
	for _, tc := range cases {
		c, err := fencelock.Open(ctx, tc.url)
		if err == nil {
			c.Close()
			t.Errorf("Open(%q) succeeded, want ErrInvalid", tc.url)
			continue
		}
		if !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want ErrInvalid", tc.url, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) message %q does not mention %q", tc.url, err, tc.want)
		}
	}
}

func TestOpenAppliesMuxParams(t *testing.T) {
	ctx := context.Background()
	c, err := fencelock.Open(ctx, "mem://muxparams?prefix=team-a/&ttl=7s&wait=50ms")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	l, err := c.TryAcquire(ctx, "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if d := l.ValidUntil().Sub(start); d < 6*time.Second || d > 7*time.Second {
		t.Errorf("ttl=7s gave a validity of %v", d)
	}
	if _, _, held := memory.Named("muxparams").Holder("team-a/job"); !held {
		t.Errorf("prefix=team-a/ not applied to the store key")
	}
	// wait=50ms bounds Acquire.
	c2, err := fencelock.Open(ctx, "mem://muxparams?prefix=team-a/&wait=50ms")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, err = c2.Acquire(ctx, "job", nil)
	if !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Errorf("Acquire with wait=50ms on a held lock: %v, want ErrNotAcquired", err)
	}
}

func TestMalformedURLHidesPassword(t *testing.T) {
	_, err := fencelock.Open(context.Background(), "redis://user:s3cret@host:port:bad/0")
	if err == nil || !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("Open: %v, want ErrInvalid", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error reveals the password: %v", err)
	}
}

func TestSchemesRegistered(t *testing.T) {
	s := fencelock.Schemes()
	for _, want := range []string{"mem", "memrpc"} {
		found := false
		for _, x := range s {
			found = found || x == want
		}
		if !found {
			t.Errorf("scheme %q not registered: %v", want, s)
		}
	}
}

func TestNilContextIsInvalid(t *testing.T) {
	c := memClient(t, nil, nil)
	defer c.Close()
	//lint:ignore SA1012 testing the nil-context error
	_, err := c.TryAcquire(nil, "x", nil) //nolint:staticcheck
	if !errors.Is(err, fencelock.ErrInvalid) {
		t.Errorf("TryAcquire(nil ctx) = %v, want ErrInvalid", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:s3cret@127.0.0.1:6379/0":     "redis://:xxxxx@127.0.0.1:6379/0",
		"postgres://u:s3cret@h/db?sslmode=off": "postgres://u:xxxxx@h/db?sslmode=off",
		"mem://":                               "mem://",
		"redis://u:s3cret@h:bad port/0":        "redis://xxxxx@h:bad port/0",
	} {
		if got := fencelock.RedactURL(in); got != want || strings.Contains(got, "s3cret") {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestErrorQuotesNames: a name validation refuses (a NUL byte, invalid
// UTF-8, a control character) is quoted in the message, so the log line
// stays printable text on one line.
func TestErrorQuotesNames(t *testing.T) {
	for _, name := range []string{"a\x00b", "bad\xff", "line\nbreak", strings.Repeat("é", 40)} {
		msg := (&fencelock.Error{Op: "acquire", Name: name, Err: fencelock.ErrInvalid}).Error()
		for _, r := range msg {
			if r == 0 || r == '\n' || r == utf8.RuneError || !unicode.IsPrint(r) {
				t.Errorf("name %q: message %q has the unprintable %U", name, msg, r)
				break
			}
		}
	}
}

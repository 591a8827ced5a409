package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
)

// newTestBackend returns a driver on a real server (or REDIS_URL's).
func newTestBackend(t *testing.T) (*backend, goredis.UniversalClient) {
	t.Helper()
	r := testserver.StartRedis(t)
	o, err := goredis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	o.ContextTimeoutEnabled = true
	rc := goredis.NewClient(o)
	b := newBackend(rc, true)
	t.Cleanup(func() { _ = b.Close() })
	return b, rc
}

const tokA, tokB = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

func uniqueName(t *testing.T) string {
	return "fencelock-test/" + t.Name() + "/" + time.Now().Format("150405.000000")
}

// TestRetriedAcquireAnswersSameGrant: go-redis retries a command whose reply
// was lost (timeouts, EOF). The script answers a retry of a granted attempt
// with the same fence instead of "held by another owner".
func TestRetriedAcquireAnswersSameGrant(t *testing.T) {
	b, _ := newTestBackend(t)
	ctx := t.Context()
	req := driver.AcquireRequest{Name: uniqueName(t), Token: tokA, TTL: 10 * time.Second}
	l1, err := b.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("retry of a granted attempt: %v", err)
	}
	if l1.Fence() != l2.Fence() {
		t.Fatalf("retry answered fence %d, the grant was %d", l2.Fence(), l1.Fence())
	}
	_, err = b.TryAcquire(ctx, driver.AcquireRequest{Name: req.Name, Token: tokB, TTL: time.Second})
	if !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("another token: %v, want ErrNotAcquired", err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAbandonedTokenGrantsNothing: once an attempt is abandoned (its reply
// was lost), the attempt's request grants nothing even if the server only
// gets to it afterwards; and an abandoned grant is released.
func TestAbandonedTokenGrantsNothing(t *testing.T) {
	b, rc := newTestBackend(t)
	ctx := t.Context()
	name := uniqueName(t)
	req := driver.AcquireRequest{Name: name, Token: tokA, TTL: 10 * time.Second}
	k := keysFor(name)
	cause := errors.New("reply lost")

	// Abandon before the request arrives (it was stuck in a buffer).
	if err := b.cleanup(ctx, k, req, cause); err != cause {
		t.Fatalf("cleanup: %v", err)
	}
	_, err := b.TryAcquire(ctx, req)
	if !errors.Is(err, driver.ErrNotAcquired) || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("late request of an abandoned attempt: %v, want ErrNotAcquired (abandoned)", err)
	}
	if n, _ := rc.Exists(ctx, name).Result(); n != 0 {
		t.Fatalf("late request of an abandoned attempt left the lock held")
	}
	if p, _ := rc.PTTL(ctx, k.void(tokA)).Result(); p <= 0 || p > voidLifetime {
		t.Fatalf("void key PTTL %v, want (0, %v]", p, voidLifetime)
	}

	// Abandon after the request was granted: the grant is released.
	req.Token = tokB
	if _, err := b.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := b.cleanup(ctx, k, req, cause); err != cause {
		t.Fatalf("cleanup: %v", err)
	}
	if n, _ := rc.Exists(ctx, name).Result(); n != 0 {
		t.Fatalf("abandoned grant still held")
	}
}

// TestCleanupFailureIsIndeterminate: a request that never left the client
// cannot have been applied, so TryAcquire reports it without abandoning;
// a request that may have been applied and could not be abandoned is
// reported as ErrIndeterminate.
func TestCleanupFailureIsIndeterminate(t *testing.T) {
	rc := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	b := newBackend(rc, true)
	defer b.Close()
	_, err := b.TryAcquire(t.Context(), driver.AcquireRequest{Name: "x", Token: tokA, TTL: time.Second})
	if !errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrIndeterminate) {
		t.Fatalf("refused connection: %v, want ErrUnavailable without ErrIndeterminate (nothing was sent)", err)
	}
	// A failed abandon after a possibly applied request is indeterminate.
	err = b.cleanup(t.Context(), keysFor("x"), driver.AcquireRequest{Name: "x", Token: tokA, TTL: time.Second}, errors.New("reply lost"))
	if !errors.Is(err, driver.ErrIndeterminate) {
		t.Fatalf("failed abandon: %v, want ErrIndeterminate", err)
	}
}

func TestClassify(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		ctx    context.Context
		err    error
		want   []error
		unwant []error
	}{
		{ctx, errors.New("dial tcp: connection refused"), []error{driver.ErrUnavailable}, nil},
		{ctx, goredis.ErrClosed, []error{driver.ErrClosed}, []error{driver.ErrUnavailable}},
		{cancelled, context.Canceled, []error{context.Canceled}, nil},
		{cancelled, errors.New("i/o timeout"), []error{context.Canceled}, nil},
		{ctx, replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"), nil, []error{driver.ErrUnavailable}},
		{ctx, replyErr("CLUSTERDOWN The cluster is down"), []error{driver.ErrUnavailable}, nil},
		{ctx, replyErr("LOADING Redis is loading the dataset in memory"), []error{driver.ErrUnavailable}, nil},
		{ctx, replyErr("MOVED 3999 127.0.0.1:6381"), []error{driver.ErrInvalid}, []error{driver.ErrUnavailable}},
	} {
		got := classify(tc.ctx, "op", tc.err)
		for _, w := range tc.want {
			if !errors.Is(got, w) {
				t.Errorf("classify(%v) = %v: want it to match %v", tc.err, got, w)
			}
		}
		for _, w := range tc.unwant {
			if errors.Is(got, w) {
				t.Errorf("classify(%v) = %v: must not match %v", tc.err, got, w)
			}
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("classify(%v) = %v: lost the cause", tc.err, got)
		}
	}
}

type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

package dynamodb_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/dynamodb"
	"github.com/fencelock/fencelock/internal/testserver"
)

// lateWire is an HTTP transport to the real server that holds the first
// request whose body contains match until let is called, as a network
// or a loaded server delays it. The held request reaches the server in
// any case: if its caller gives up (its context ends) first, the request
// is still served when let is called, after whatever the caller sent
// since; the caller gets its context error, as from a real connection.
type lateWire struct {
	match string

	mu     sync.Mutex
	held   *http.Request
	heldCh chan struct{} // closed when a request is held
	letCh  chan struct{} // closed by let
	served chan struct{} // closed when the held request was served
}

func newLateWire(match string) *lateWire {
	return &lateWire{match: match, heldCh: make(chan struct{}), letCh: make(chan struct{}), served: make(chan struct{})}
}

func (w *lateWire) RoundTrip(req *http.Request) (*http.Response, error) {
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	w.mu.Lock()
	hold := w.held == nil && strings.Contains(string(b), w.match)
	if hold {
		w.held = req
		close(w.heldCh)
	}
	w.mu.Unlock()
	if !hold {
		return http.DefaultTransport.RoundTrip(req)
	}
	type reply struct {
		resp *http.Response
		err  error
	}
	ch := make(chan reply, 1)
	go func() {
		defer close(w.served)
		<-w.letCh
		r := req.Clone(context.WithoutCancel(req.Context()))
		r.Body = io.NopCloser(bytes.NewReader(b))
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil {
			// Read it all here: the caller may be gone.
			rb, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body, err = io.NopCloser(bytes.NewReader(rb)), rerr
		}
		ch <- reply{resp, err}
	}()
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

func (w *lateWire) let() { close(w.letCh) }

// openLate opens a Client whose requests go through lw.
func openLate(t *testing.T, rawURL string, lw *lateWire) *fencelock.Client {
	t.Helper()
	var mux fencelock.URLMux
	mux.Register(dynamodb.Scheme, &dynamodb.URLOpener{HTTPClient: &http.Client{Transport: lw, Timeout: 10 * time.Second}})
	c, err := mux.Open(t.Context(), rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// cancelWhileHeld runs call, cancels its ctx while lw holds its request,
// and returns call's error once the held request was served: at once if
// the request outlives the ctx (the caller waits for its outcome), else
// after call returned (the server applies it after whatever the caller
// sent as it gave up).
func cancelWhileHeld(t *testing.T, lw *lateWire, call func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case <-lw.heldCh:
	case <-time.After(10 * time.Second):
		t.Fatalf("no request matching %q within 10s", lw.match)
	}
	cancel()
	var (
		err error
		got bool
	)
	if lw.held.Context().Err() != nil {
		select {
		case err = <-done:
			got = true
		case <-time.After(10 * time.Second):
			t.Fatal("the call did not return within 10s of its cancellation")
		}
	}
	lw.let()
	<-lw.served
	if !got {
		err = <-done
	}
	return err
}

// TestLeaveAfterLateJoin: a waiter whose Acquire ends (its ctx) while its
// join of the wait queue is on the way leaves no entry behind, whenever
// the server applies the join. Before the fix the join was cancelled
// with ctx: the leave read the item before the server applied it, found
// no entry and stopped, and the entry then held the line up for its
// lapse time (a 15s-TTL waiter of BenchmarkContended: 10s; had the
// holder seen it first in line, its whole lease), TryAcquire refusing
// meanwhile: the "no grants" chunks.
func TestLeaveAfterLateJoin(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	lw := newLateWire("list_append")
	waiter, holder, other := openLate(t, d.URL(), lw), open(t, d.URL(), nil), open(t, d.URL(), nil)
	n := name(t)
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	l, err := holder.TryAcquire(ctx, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	werr := cancelWhileHeld(t, lw, func(wctx context.Context) error {
		wl, err := waiter.Acquire(wctx, n, opts)
		if err == nil {
			_ = wl.Release(ctx)
		}
		return err
	})
	if !errors.Is(werr, context.Canceled) {
		t.Fatalf("the waiter's Acquire: %v, want context.Canceled", werr)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := other.Inspect(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if info.Waiters != 0 {
		t.Errorf("%d waiters queued after the only waiter left, want 0", info.Waiters)
	}
	ol, err := other.TryAcquire(ctx, n, opts)
	if err != nil {
		t.Fatalf("TryAcquire of the released lock after the waiter left: %v", err)
	}
	_ = ol.Release(ctx)
}

// TestTryAcquireLateWrite: a TryAcquire whose ctx ends while its acquire
// write is on the way leaves the lock free or returns it, whenever the
// server applies the write. Before the fix the write was cancelled with
// ctx; its cleanup (release if the item holds our version) reached the
// server first and was refused, and the write then granted the lock to
// nobody for its TTL.
func TestTryAcquireLateWrite(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	lw := newLateWire("attribute_not_exists(#k)")
	c, other := openLate(t, d.URL(), lw), open(t, d.URL(), nil)
	n := name(t)
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	err := cancelWhileHeld(t, lw, func(cctx context.Context) error {
		l, err := c.TryAcquire(cctx, n, opts)
		if err == nil {
			err = l.Release(ctx)
		}
		return err
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire: %v, want a grant or context.Canceled", err)
	}
	ol, err := other.TryAcquire(ctx, n, opts)
	if err != nil {
		t.Fatalf("TryAcquire by another Client after the cancelled one: %v", err)
	}
	_ = ol.Release(ctx)
}

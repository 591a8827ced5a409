package dynamodb_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/dynamodb"
	"github.com/fencelock/fencelock/internal/testserver"
)

// wire is an HTTP transport to the real server that counts requests by
// operation and can lose replies (the request is served, its reply
// dropped, as a connection reset after sending would) or cut the network
// (nothing sent).
type wire struct {
	base *http.Transport

	mu      sync.Mutex
	ops     map[string]int
	cs      []string      // the ConditionExpression of each request since the last take
	gate    chan struct{} // while non-nil, GetItem requests wait for it to close
	parked  chan struct{} // told (without blocking) when a GetItem waits at gate
	loseOp  string
	lose    int  // replies of loseOp still to lose
	thenCut bool // cut the network once the last of them is lost
	down    bool
	cutOp   string // cut the network when a request of this operation comes
}

func newWire() *wire {
	return &wire{base: http.DefaultTransport.(*http.Transport).Clone(), ops: map[string]int{}}
}

func (w *wire) RoundTrip(req *http.Request) (*http.Response, error) {
	op := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	var in struct{ ConditionExpression, ProjectionExpression string }
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		_ = json.Unmarshal(b, &in)
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	w.mu.Lock()
	gate, parked := w.gate, w.parked
	w.mu.Unlock()
	if gate != nil && op == "GetItem" {
		select {
		case parked <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	w.mu.Lock()
	w.ops[op]++
	if in.ProjectionExpression != "" {
		// Counted apart: a projection costs dynalite a parse on every
		// read, and the backend's reads have none.
		w.ops[op+" projected"]++
	}
	w.cs = append(w.cs, in.ConditionExpression)
	lose := w.lose > 0 && op == w.loseOp
	if lose {
		w.lose--
	}
	if op == w.cutOp {
		w.down = true
	}
	down := w.down
	w.mu.Unlock()
	if down {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("test network cut")}
	}
	resp, err := w.base.RoundTrip(req)
	if lose && err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		w.mu.Lock()
		if w.lose == 0 && w.thenCut {
			w.down = true
		}
		w.mu.Unlock()
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer (test: reply lost)")}
	}
	return resp, err
}

// take returns the counts since the last take.
func (w *wire) take() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := maps.Clone(w.ops)
	clear(w.ops)
	w.cs = nil
	return m
}

// holdReads makes GetItem requests wait until the returned func is
// called; parked is told when one waits (so a Client whose one poller
// waits there has no read in flight).
func (w *wire) holdReads() (open func(), parked <-chan struct{}) {
	g, p := make(chan struct{}), make(chan struct{}, 1)
	w.mu.Lock()
	w.gate, w.parked = g, p
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		w.gate, w.parked = nil, nil
		w.mu.Unlock()
		close(g)
	}, p
}

// conds returns the condition expressions sent since the last take, in
// order ("" for a request without one).
func (w *wire) conds() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.cs)
}

func (w *wire) loseNext(op string, n int) {
	w.mu.Lock()
	w.loseOp, w.lose, w.thenCut = op, n, false
	w.mu.Unlock()
}

// loseThenCut loses the next reply of op, then cuts the network.
func (w *wire) loseThenCut(op string) {
	w.mu.Lock()
	w.loseOp, w.lose, w.thenCut = op, 1, true
	w.mu.Unlock()
}

// cutAt cuts the network when the next request of op comes (that one
// included).
func (w *wire) cutAt(op string) {
	w.mu.Lock()
	w.cutOp = op
	w.mu.Unlock()
}

func (w *wire) cut(down bool) {
	w.mu.Lock()
	w.down = down
	if !down {
		w.cutOp = ""
	}
	w.mu.Unlock()
}

// openWire opens a Client whose requests go through w, with the SDK
// making at most attempts attempts per operation.
func openWire(tb testing.TB, rawURL string, w *wire, attempts int) *fencelock.Client {
	tb.Helper()
	var mux fencelock.URLMux
	mux.Register(dynamodb.Scheme, &dynamodb.URLOpener{
		HTTPClient: &http.Client{Transport: w, Timeout: 5 * time.Second},
		Configure: func(o *ddb.Options) {
			o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts = attempts
				so.RateLimiter = ratelimit.None
				so.MaxBackoff = 10 * time.Millisecond
			})
		},
	})
	c, err := mux.Open(tb.Context(), rawURL, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close(); w.base.CloseIdleConnections() })
	return c
}

func wantOps(t *testing.T, what string, got map[string]int, want map[string]int) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s made requests %v, want %v", what, got, want)
	}
}

// TestOneWriteEach: acquire and release are one conditional write each;
// a refused acquire is one write and one read (of the whole item, without
// a projection); a heartbeat is one write.
func TestOneWriteEach(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	w := newWire()
	c := openWire(t, d.URL(), w, 3)
	other := open(t, d.URL(), nil)
	n := name(t)
	noRenew := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	for i := range 3 { // first grant creates the item; later ones reuse it
		w.take()
		l, err := c.TryAcquire(ctx, n, noRenew)
		if err != nil {
			t.Fatal(err)
		}
		wantOps(t, "TryAcquire", w.take(), map[string]int{"UpdateItem": 1})
		if i == 0 {
			if err := l.Extend(ctx, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			wantOps(t, "Extend", w.take(), map[string]int{"UpdateItem": 1})
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wantOps(t, "Release", w.take(), map[string]int{"UpdateItem": 1})
	}
	held, err := other.TryAcquire(ctx, n, noRenew)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	w.take()
	if _, err := c.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	wantOps(t, "refused TryAcquire", w.take(), map[string]int{"UpdateItem": 1, "GetItem": 1})
}

// TestLostAcquireReply: the acquire write is applied but its reply is
// lost. Without SDK retries, TryAcquire releases what it may hold before
// returning the error (another client can take the lock at once); with
// retries, the retry is refused by the first attempt's grant, and the
// backend finds the grant is its own.
func TestLostAcquireReply(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	other := open(t, d.URL(), nil)

	w := newWire()
	c := openWire(t, d.URL(), w, 1)
	n := name(t)
	w.loseNext("UpdateItem", 1)
	_, err := c.TryAcquire(ctx, n, nil)
	if err == nil || !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrIndeterminate) {
		t.Fatalf("TryAcquire with its reply lost: %v, want ErrUnavailable (cleaned up, not indeterminate)", err)
	}
	l, err := other.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatalf("the lost grant was left held: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Reply lost and the cleanup cannot be sent: ErrIndeterminate.
	n2 := n + "-cut"
	w.loseThenCut("UpdateItem")
	_, err = c.TryAcquire(ctx, n2, &fencelock.AcquireOptions{TTL: 500 * time.Millisecond})
	if !errors.Is(err, fencelock.ErrIndeterminate) {
		t.Fatalf("TryAcquire with its reply lost and no way to clean up: %v, want ErrIndeterminate", err)
	}
	w.cut(false)

	wr := newWire()
	cr := openWire(t, d.URL(), wr, 3)
	n3 := n + "-retried"
	wr.take()
	wr.loseNext("UpdateItem", 1)
	l, err = cr.TryAcquire(ctx, n3, &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatalf("TryAcquire whose first attempt was granted and retried: %v, want the grant", err)
	}
	wantOps(t, "retried TryAcquire", wr.take(), map[string]int{"UpdateItem": 2, "GetItem": 1})
	if _, err := other.TryAcquire(ctx, n3, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("another client's TryAcquire after the recovered grant: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release of the recovered grant: %v", err)
	}
}

// TestLostHeartbeatReply: a heartbeat applied with its reply lost leaves
// the lease unsure of its version; the next heartbeat and the release are
// conditional on either version and succeed.
func TestLostHeartbeatReply(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	w := newWire()
	c := openWire(t, d.URL(), w, 1)
	other := open(t, d.URL(), nil)
	n := name(t)
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	w.loseNext("UpdateItem", 2)
	for i := range 2 {
		if err := l.Extend(ctx, 10*time.Second); err == nil || errors.Is(err, fencelock.ErrLeaseLost) {
			t.Fatalf("Extend %d with its reply lost: %v, want an error that is not ErrLeaseLost", i, err)
		}
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend after two lost replies: %v", err)
	}
	w.loseNext("UpdateItem", 1)
	if err := l.Extend(ctx, 10*time.Second); err == nil {
		t.Fatal("Extend with its reply lost succeeded")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after a lost heartbeat reply: %v", err)
	}
	l2, err := other.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatalf("the lock was not released: %v", err)
	}
	_ = l2.Release(ctx)

}

// TestRetriedHeartbeatUncheckable: a heartbeat applied with its reply
// lost, whose retry the condition refuses, and whose check read cannot
// reach the server, is of unknown outcome (ErrUnavailable), not
// ErrLeaseLost: the lease is still ours, and the next heartbeat, once the
// network is back, succeeds. It failed with the lease declared lost.
func TestRetriedHeartbeatUncheckable(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	w := newWire()
	c := openWire(t, d.URL(), w, 3)
	other := open(t, d.URL(), nil)
	n := name(t)
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	w.take()
	w.loseNext("UpdateItem", 1)
	w.cutAt("GetItem")
	err = l.Extend(ctx, 10*time.Second)
	if !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Extend whose retry was refused and whose check read failed: %v, want ErrUnavailable and not ErrLeaseLost", err)
	}
	wantOps(t, "the uncheckable heartbeat", w.take(), map[string]int{"UpdateItem": 2, "GetItem": 3}) // the SDK tries the read 3 times
	w.cut(false)
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("the next Extend, with the network back: %v, want success (the lease was never lost)", err)
	}
	if _, err := other.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("another client's TryAcquire: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestFastPath: a Client taking back a lock it released itself sends one
// short write (the fast path); if another Client took and released the
// lock since, that write is refused and a read and the general write
// follow, with a fence above the other's; if a waiter joined the queue
// since, the write is refused and the releaser does not barge.
func TestFastPath(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	w := newWire()
	c := openWire(t, d.URL(), w, 3)
	other := open(t, d.URL()+"&poll_interval=1s", nil)
	n := name(t)
	noRenew := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	cycle := func(cl *fencelock.Client) fencelock.Fence {
		t.Helper()
		l, err := cl.TryAcquire(ctx, n, noRenew)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return l.Fence()
	}
	f := cycle(c)
	for range 3 {
		w.take()
		g := cycle(c)
		if conds := w.conds(); len(conds) == 0 || conds[0] != "#rvn = :w AND size(#q) = :zero" {
			t.Errorf("the acquire after the Client's own release sent conditions %q, want the fast path's first", conds)
		}
		wantOps(t, "TryAcquire+Release after the Client's own release", w.take(), map[string]int{"UpdateItem": 2})
		if g != f+1 {
			t.Fatalf("fence %d after fence %d on the fast path, want %d", g, f, f+1)
		}
		f = g
	}
	o := cycle(other)
	if o <= f {
		t.Fatalf("the other Client's fence %d after %d", o, f)
	}
	w.take()
	if g := cycle(c); g <= o {
		t.Fatalf("fence %d after the other Client's %d", g, o)
	}
	wantOps(t, "TryAcquire+Release after another Client's", w.take(), map[string]int{"UpdateItem": 3, "GetItem": 1})

	// A waiter joins while c holds the lock; once c released it, c's
	// fast-path write is refused (the waiter reads only every second).
	l, err := c.TryAcquire(ctx, n, noRenew)
	if err != nil {
		t.Fatal(err)
	}
	// The waiter, once granted, holds until the check below is done: the
	// releaser must not get the lock back while it waits or holds (it
	// polls every few ms, so it may take the lock before the check).
	done, hold := make(chan error, 1), make(chan struct{})
	go func() {
		wl, err := other.Acquire(ctx, n, noRenew)
		if err == nil {
			<-hold
			err = wl.Release(ctx)
		}
		done <- err
	}()
	defer func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	}()
	awaitQueueLen(t, native(t, other), tableOf(t, d.URL()), n, 1)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if bl, err := c.TryAcquire(ctx, n, noRenew); !errors.Is(err, fencelock.ErrNotAcquired) {
		if err == nil {
			_ = bl.Release(ctx)
		}
		t.Fatalf("TryAcquire by the releaser while a waiter is queued or holds: %v, want ErrNotAcquired", err)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

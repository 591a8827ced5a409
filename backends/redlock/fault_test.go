package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redlock"
	"github.com/fencelock/fencelock/internal/faultrec"
	"github.com/fencelock/fencelock/internal/faulttest"
	"github.com/fencelock/fencelock/internal/testserver"
)

// margin is the slack allowed for timing assertions on a loaded machine.
const margin = 500 * time.Millisecond

// nodes starts n primaries of its own for a fault test.
func nodes(t *testing.T, n int, opts *testserver.RedisNodesOptions) *testserver.RedisNodes {
	t.Helper()
	return testserver.StartRedisNodes(t, n, opts)
}

// holders returns, per primary, the value of key (""= none; "?" = the
// primary did not answer).
func holders(ctx context.Context, m *testserver.RedisNodes, key string) []string {
	vs := make([]string, len(m.Nodes))
	for i, n := range m.Nodes {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := n.Do(cctx, "GET", key)
		cancel()
		switch {
		case err != nil:
			vs[i] = "?"
		case v == nil:
			vs[i] = ""
		default:
			vs[i], _ = v.(string)
		}
	}
	return vs
}

func count(vs []string, want string) int {
	n := 0
	for _, v := range vs {
		if v == want {
			n++
		}
	}
	return n
}

// TestFaultTwoOfFiveKilled: with any 2 of 5 primaries dead, acquire,
// extend, release and hand-off keep working, and fences keep increasing.
func TestFaultTwoOfFiveKilled(t *testing.T) {
	rec := faultrec.Begin(t, faultrec.Result{Backend: "redlock", Scenario: faultrec.PrimaryLost, Case: "2 of 5 killed"})
	m := nodes(t, 5, nil)
	ctx := t.Context()
	a, b := open(t, m.URL(), nil), open(t, m.URL(), nil)
	n := name(t)
	l0, err := a.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	last := l0.Fence()
	if err := l0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 3} {
		if err := m.Kill(i); err != nil {
			t.Fatal(err)
		}
	}
	l, err := a.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatalf("TryAcquire with 2 of 5 primaries dead: %v", err)
	}
	if l.Fence() <= last {
		t.Fatalf("fence %d not above %d", l.Fence(), last)
	}
	last = l.Fence()
	if got := count(holders(ctx, m, n), "?"); got != 2 {
		t.Fatalf("%d primaries unreachable, want 2", got)
	}
	if _, err := b.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire while held: %v, want ErrNotAcquired", err)
	}
	if err := l.Extend(ctx, 2*time.Second); err != nil {
		t.Fatalf("Extend with 2 of 5 primaries dead: %v", err)
	}
	rec.Outcome = faultrec.Kept
	// Hand-off: b blocks, a releases, b gets it with a higher fence.
	got := make(chan *fencelock.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l2, err := b.Acquire(ctx, n, &fencelock.AcquireOptions{Wait: 10 * time.Second})
		if err != nil {
			errc <- err
			return
		}
		got <- l2
	}()
	time.Sleep(50 * time.Millisecond) // let b block; either way it must get the lock
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with 2 of 5 primaries dead: %v", err)
	}
	select {
	case l2 := <-got:
		took := time.Since(released)
		t.Logf("hand-off with 2 of 5 primaries dead took %v", took.Round(time.Microsecond))
		rec.WaitGranted, rec.WaitFrom = took, "release"
		rec.Fence = faultrec.FenceOf(last, l2.Fence())
		rec.SecondHolder = faultrec.OverlapNone // b's TryAcquire was refused while a held
		rec.Note = "2 of 5 primaries killed (SIGKILL) while a lease was held: TryAcquire, Extend, Release and hand-off kept working; another client was refused while held"
		if l2.Fence() <= last {
			t.Fatalf("fence after hand-off %d not above %d", l2.Fence(), last)
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case err := <-errc:
		t.Fatalf("blocked Acquire with 2 of 5 primaries dead: %v", err)
	}
	// The dead primaries come back empty; everything still works and the
	// fences still rise.
	rr := faultrec.Begin(t, faultrec.Result{Backend: "redlock", Scenario: faultrec.ServerRestarted, Case: "2 of 5 back empty", Outcome: faultrec.Granted})
	for _, i := range []int{1, 3} {
		if err := m.Start(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	l3, err := a.Acquire(ctx, n, &fencelock.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rr.Fence = faultrec.FenceOf(last, l3.Fence())
	rr.Note = "2 of 5 primaries restarted empty: the next grant's fence was still higher (the surviving majority and the time floor)"
	if l3.Fence() <= last {
		t.Fatalf("fence after restart %d not above %d", l3.Fence(), last)
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFaultThreeOfFiveKilled: with a majority dead, acquires fail fast
// with ErrUnavailable (not a hang, not ErrNotAcquired), and nothing is
// left held on the two survivors.
func TestFaultThreeOfFiveKilled(t *testing.T) {
	rec := faultrec.Begin(t, faultrec.Result{Backend: "redlock", Scenario: faultrec.PrimaryLost, Case: "3 of 5 killed"})
	m := nodes(t, 5, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	n := name(t)
	for _, i := range []int{0, 2, 4} {
		if err := m.Kill(i); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, err := c.TryAcquire(ctx, n, nil)
	took := time.Since(start)
	if !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with 3 of 5 primaries dead: %v, want ErrUnavailable", err)
	}
	start = time.Now()
	_, err = c.Acquire(ctx, n, &fencelock.AcquireOptions{Wait: 10 * time.Second})
	took = max(took, time.Since(start))
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Acquire with 3 of 5 primaries dead: %v, want ErrUnavailable", err)
	}
	if took > margin {
		t.Fatalf("failing with 3 of 5 primaries dead took %v, want fast (connections are refused)", took)
	}
	t.Logf("3 of 5 dead: refused after %v: %v", took.Round(time.Microsecond), err)
	rec.Outcome = faultrec.Refused
	rec.Note = fmt.Sprintf("3 of 5 primaries killed: TryAcquire and Acquire failed with ErrUnavailable within %v", took.Round(time.Millisecond))
	redlock.Idle(c)
	left := false
	for i, v := range holders(ctx, m, n) {
		if i%2 == 1 && v != "" {
			left = true
			t.Errorf("survivor %d holds %q after the failed attempts", i, v)
		}
	}
	if !left {
		rec.Note += "; nothing left held on the survivors"
	}
}

// TestFaultPrimaryPaused: a primary frozen (SIGSTOP) while a lease is
// held, then resumed: the lease keeps renewing on the other four, nobody
// else is granted the lock meanwhile, the attempts that queued up on the
// frozen primary grant nothing when it thaws, and the next fence is higher.
func TestFaultPrimaryPaused(t *testing.T) {
	rec := faultrec.Begin(t, faultrec.Result{Backend: "redlock", Scenario: faultrec.PrimaryLost, Case: "1 of 5 frozen"})
	m := nodes(t, 5, nil)
	ctx := t.Context()
	a, b := open(t, m.URL(), nil), open(t, m.URL(), nil)
	n := name(t)
	const ttl = 1500 * time.Millisecond // renewals (every TTL/3) stay on time on a loaded CI machine
	l, err := a.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(0); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := m.Resume(0); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer resume()
	// For more than the TTL: a's renewals succeed on the other four; b is
	// refused every time, quickly (the frozen primary is not waited for).
	deadline := time.Now().Add(ttl + ttl/2)
	tries := 0
	for time.Now().Before(deadline) {
		start := time.Now()
		_, err := b.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: ttl})
		if !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("TryAcquire while held, one primary frozen: %v, want ErrNotAcquired", err)
		}
		if took := time.Since(start); took > margin {
			t.Fatalf("refusal with one primary frozen took %v", took)
		}
		tries++
		time.Sleep(100 * time.Millisecond) // pacing between attempts, not a sync
	}
	if l.Err() != nil {
		t.Fatalf("lease lost with one primary of five frozen: %v", l.Err())
	}
	rec.Outcome = faultrec.Kept
	rec.SecondHolder = faultrec.OverlapNone // every attempt by b was refused
	rec.Note = fmt.Sprintf("1 of 5 primaries frozen (SIGSTOP) for 1.5×TTL: the lease kept renewing on the other four; %d attempts by another client were refused, each quickly", tries)
	resume()
	redlock.Idle(b)
	if err := pingAll(ctx, m); err != nil {
		t.Fatal(err)
	}
	vs := holders(ctx, m, n)
	var token string
	for _, v := range vs[1:] {
		if token == "" {
			token = v
		}
		if v != token || v == "" {
			t.Fatalf("lock key per primary after the thaw: %q: want the holder's token on the four live ones", vs)
		}
	}
	if vs[0] != "" && vs[0] != token {
		// An attempt's request stuck in the frozen primary ran when it
		// thawed, and its abandon never reached it (see Algorithm, Abandon, atop redlock.go:
		// with every pooled connection stuck, go-redis cannot open a new
		// one). That dead token must expire on its own, within the TTL.
		pttl, err := m.Nodes[0].Do(ctx, "PTTL", n)
		if p, _ := pttl.(int64); err != nil || p > ttl.Milliseconds() {
			t.Fatalf("the thawed primary holds a failed attempt's token %q with PTTL %v (%v), beyond the TTL", vs[0], pttl, err)
		}
	}
	t.Logf("%d refused attempts while a primary was frozen; thawed primary holds %q (holder %q)", tries, vs[0], token)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.Acquire(ctx, n, &fencelock.AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	rec.Fence = faultrec.FenceOf(l.Fence(), l2.Fence())
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after the freeze, not above %d", l2.Fence(), l.Fence())
	}
}

// pingAll makes sure every primary has processed what was queued on it
// before (a new connection is served after the old ones' pending input).
func pingAll(ctx context.Context, m *testserver.RedisNodes) error {
	for _, n := range m.Nodes {
		if _, err := n.Do(ctx, "PING"); err != nil {
			return err
		}
	}
	return nil
}

// TestFaultUnknownOutcome: an acquire whose ctx ends while 3 of 5
// primaries are frozen (their outcome unknown) returns the ctx error and
// ErrIndeterminate, and once they thaw nothing is held anywhere: every
// queued request was voided or undone.
func TestFaultUnknownOutcome(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	n := name(t)
	frozen := []int{0, 1, 2}
	for _, i := range frozen {
		if err := m.Pause(i); err != nil {
			t.Fatal(err)
		}
	}
	const ttl = 500 * time.Millisecond
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := c.TryAcquire(tctx, n, &fencelock.AcquireOptions{TTL: ttl})
	cancel()
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrIndeterminate) {
		t.Errorf("TryAcquire with 3 of 5 primaries frozen: %v, want DeadlineExceeded and ErrIndeterminate", err)
	}
	if took > 200*time.Millisecond+ttl+margin {
		t.Errorf("TryAcquire with 3 of 5 primaries frozen took %v", took)
	}
	// The two live primaries granted and were released already.
	vs := holders(ctx, m, n)
	if vs[3] != "" || vs[4] != "" {
		t.Fatalf("live primaries hold %q, %q after the failed attempt", vs[3], vs[4])
	}
	for _, i := range frozen {
		if err := m.Resume(i); err != nil {
			t.Fatal(err)
		}
	}
	redlock.Idle(c)
	if err := pingAll(ctx, m); err != nil {
		t.Fatal(err)
	}
	if vs := holders(ctx, m, n); count(vs, "") != 5 {
		t.Fatalf("after the thaw the lock key per primary is %q: an abandoned attempt left a grant", vs)
	}
	t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
}

// TestUnknownOutcomeHealthy: TryAcquires cut short at every point of the
// exchange (ctx deadlines from 0 to a few round trips) on live primaries:
// each leaves the lock free for the next client at once, and when the
// background calls have ended nothing is held on any primary.
func TestUnknownOutcomeHealthy(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	a, b := open(t, m.URL(), nil), open(t, m.URL(), nil)
	n := name(t)
	failed := 0
	for i := range 200 {
		d := time.Duration(i%40) * 25 * time.Microsecond
		tctx, cancel := context.WithTimeout(ctx, d)
		l, err := a.TryAcquire(tctx, n, nil)
		cancel()
		if err == nil {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		failed++
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("TryAcquire with a %v deadline: %v, want DeadlineExceeded", d, err)
		}
		l2, err := b.TryAcquire(ctx, n, nil)
		if err != nil {
			t.Fatalf("right after an attempt cut short at %v, another client cannot acquire: %v", d, err)
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	redlock.Idle(a)
	redlock.Idle(b)
	if vs := holders(ctx, m, n); count(vs, "") != 5 {
		t.Fatalf("lock key per primary at the end: %q, want none", vs)
	}
	t.Logf("%d of 200 attempts cut short", failed)
}

// TestExtendNeedsMajority: Extend succeeds while a majority still holds
// the lease's key, and reports the lease lost (freeing the rest) as soon
// as a majority no longer does.
func TestExtendNeedsMajority(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	n := name(t)
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 5 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	redlock.Idle(c) // every primary has answered the acquire
	del := func(i int) {
		if _, err := m.Nodes[i].Do(ctx, "DEL", n); err != nil {
			t.Fatal(err)
		}
	}
	del(0)
	del(1)
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend with the key on 3 of 5 primaries %q: %v", holders(ctx, m, n), err)
	}
	del(2)
	if err := l.Extend(ctx, 5*time.Second); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Extend with the key on 2 of 5 primaries: %v, want ErrLeaseLost", err)
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("lease Err = %v, want ErrLeaseLost", l.Err())
	}
	redlock.Idle(c)
	if vs := holders(ctx, m, n); count(vs, "") != 5 {
		t.Fatalf("lock key per primary after the loss: %q: the rest was not freed", vs)
	}
}

// TestReleaseNeverTouchesAnotherHolder: a stale lease's Release on
// primaries now held by another owner deletes nothing there.
func TestReleaseNeverTouchesAnotherHolder(t *testing.T) {
	m := nodes(t, 3, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	n := name(t)
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 5 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	redlock.Idle(c)
	for _, nd := range m.Nodes[:2] {
		if _, err := nd.Do(ctx, "SET", n, "other-owner", "PX", "10000"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Release(ctx); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Release with 2 of 3 primaries held by another owner: %v, want ErrLeaseLost", err)
	}
	redlock.Idle(c) // the third primary's release ends in the background
	vs := holders(ctx, m, n)
	if vs[0] != "other-owner" || vs[1] != "other-owner" || vs[2] != "" {
		t.Fatalf("lock key per primary after the stale Release: %q", vs)
	}
}

// TestFaultClientPartitioned: the holder's client cut off from every
// primary (a paused proxy in front of each: connections stay open, no byte
// moves) while another client waits. The holder's renewals cannot arrive:
// its lease ends at its ValidUntil; the primaries expire its keys and the
// waiter is granted, after the holder's lease ended, with a higher fence;
// the stale holder's fenced write is rejected; after the heal its Release
// is ErrLeaseLost and leaves the new holder's lock alone.
func TestFaultClientPartitioned(t *testing.T) {
	m := nodes(t, 5, nil)
	var addrs []string
	var proxies []*testserver.EtcdProxy
	for _, a := range m.Addrs() {
		p, err := testserver.NewEtcdProxy(a)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		addrs = append(addrs, p.Addr())
		proxies = append(proxies, p)
	}
	const ttl = time.Second
	cut := open(t, "redlock://"+strings.Join(addrs, ","), nil)
	faulttest.ClientPartitioned(t, faulttest.Partition{
		Backend: "redlock",
		Cut:     cut,
		Other:   open(t, m.URL(), nil),
		Pause: func() {
			for _, p := range proxies {
				p.Pause()
			}
		},
		Resume: func() {
			for _, p := range proxies {
				p.Resume()
			}
		},
		Settle: func() { redlock.Idle(cut) }, // every primary has answered
		Name:   name(t), TTL: ttl,
		LostWithin: ttl + margin, GrantWithin: 3*ttl + margin,
		Story: "holder cut off from all 5 primaries by paused proxies, TTL %v: its lease ended locally %v after the cut; the primaries expired its keys and the waiter was granted %v after the cut; the stale holder's fenced write was rejected",
	})
}

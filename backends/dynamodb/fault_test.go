package dynamodb_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
	"github.com/fencelock/fencelock/internal/faultrec"
	"github.com/fencelock/fencelock/internal/faulttest"
	"github.com/fencelock/fencelock/internal/testserver"
)

// margin is the slack allowed for timing assertions on a loaded machine.
const margin = 500 * time.Millisecond

// TestFaultServerKilledRestarted: dynalite killed (SIGKILL) and restarted
// from its data dir while a lease is held. The lease survives (its
// heartbeats resume; nobody else gets the lock), the fence is still in the
// item, and the next grant's fence is higher.
func TestFaultServerKilledRestarted(t *testing.T) {
	d := testserver.StartDynaliteProcess(t, &testserver.DynaliteOptions{Persist: true})
	rec := faultrec.Begin(t, faultrec.Result{Backend: "dynamodb", Scenario: faultrec.ServerRestarted, Case: "from its data"})
	ctx := t.Context()
	c, other := open(t, d.URL(), nil), open(t, d.URL(), nil)
	n := name(t)
	for range 3 {
		l, err := c.TryAcquire(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const ttl = 4 * time.Second
	held, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := d.Proc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("dynalite restarted from %s in %v", d.Dir, time.Since(killed).Round(time.Millisecond))
	out, err := native(t, c).GetItem(ctx, &ddb.GetItemInput{TableName: new(tableOf(t, d.URL())), ConsistentRead: new(true),
		Key: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: n}}})
	if err != nil {
		t.Fatalf("read after restart: %v", err)
	}
	if f, ok := out.Item["fence"].(*types.AttributeValueMemberN); !ok || f.Value != held.Fence().String() {
		t.Fatalf("fence after restart = %#v, want %d: the item did not survive", out.Item["fence"], held.Fence())
	}
	if _, err := other.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		rec.SecondHolder = faultrec.OverlapFound
		t.Fatalf("TryAcquire by another client after the restart: %v, want ErrNotAcquired", err)
	}
	rec.SecondHolder = faultrec.OverlapNone
	// Hold past a whole TTL after the crash: renewals made it through.
	vu := held.ValidUntil()
	for time.Since(killed) < ttl+ttl/2 {
		select {
		case <-held.Done():
			t.Fatalf("lease lost across a restart that kept the data: %v", held.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !held.ValidUntil().After(vu) {
		t.Fatalf("ValidUntil did not move after the restart: renewals failed")
	}
	rec.Outcome = faultrec.Kept
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := other.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	rec.Fence = faultrec.FenceOf(held.Fence(), l.Fence())
	rec.Note = fmt.Sprintf("dynalite killed (SIGKILL) and restarted from its data dir, TTL %v: the lease kept renewing through the restart; another client was refused", ttl)
	if l.Fence() <= held.Fence() {
		t.Fatalf("fence %d after the restart, not above %d", l.Fence(), held.Fence())
	}
}

// TestFaultServerUnreachable: dynalite frozen (SIGSTOP) mid-hold. The
// holder's heartbeats fail and its lease ends at its local validity
// deadline, which comes before any waiter can have watched the last
// version for a full lease: the waiter's grant comes after it.
func TestFaultServerUnreachable(t *testing.T) {
	d := testserver.StartDynaliteProcess(t, nil)
	rec := faultrec.Begin(t, faultrec.Result{Backend: "dynamodb", Scenario: faultrec.PrimaryLost, Case: "the only server frozen"})
	ctx := t.Context()
	a := open(t, d.URL(), nil)
	b := open(t, d.URL()+"&poll_interval=20ms", nil)
	n := name(t)
	const ttl = 800 * time.Millisecond
	l, err := a.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		l  *fencelock.Lease
		at time.Time
		e  error
	}
	got := make(chan res, 1)
	go func() {
		l2, err := b.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: 10 * time.Second, Wait: 20 * time.Second})
		got <- res{l2, time.Now(), err}
	}()
	if err := d.Proc.Pause(); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	paused := true
	defer func() {
		if paused {
			_ = d.Proc.Resume()
		}
	}()
	vu := l.ValidUntil()
	select {
	case <-l.Done():
	case <-time.After(time.Until(vu) + margin):
		t.Fatalf("lease still held %v after its ValidUntil with the server frozen", time.Since(vu))
	}
	lostAt := time.Now()
	if lostAt.Before(vu) {
		t.Fatalf("lease ended %v before its ValidUntil", vu.Sub(lostAt))
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("lease Err = %v, want ErrLeaseLost", l.Err())
	}
	rec.Outcome = faultrec.Lost
	if err := d.Proc.Resume(); err != nil {
		t.Fatal(err)
	}
	resumedAfter := time.Since(pausedAt)
	paused = false
	r := <-got
	if r.e != nil {
		t.Fatalf("waiter: %v", r.e)
	}
	defer r.l.Release(ctx)
	rec.WaitGranted, rec.WaitFrom = r.at.Sub(pausedAt), "SIGSTOP"
	rec.Fence = faultrec.FenceOf(l.Fence(), r.l.Fence())
	rec.SecondHolder = faultrec.OverlapOf(!r.at.After(lostAt) || !r.at.After(vu))
	rec.Note = fmt.Sprintf("the only server frozen (SIGSTOP) mid-hold, TTL %v: the lease ended at its ValidUntil, %v after the freeze; the server resumed after %v and the waiter was granted after watching the version for a lease", ttl, lostAt.Sub(pausedAt).Round(time.Millisecond), resumedAfter.Round(time.Millisecond))
	if !r.at.After(lostAt) || !r.at.After(vu) {
		t.Fatalf("waiter granted at %v, before the holder's lease ended (%v, ValidUntil %v)", r.at.Format("15:04:05.000"), lostAt.Format("15:04:05.000"), vu.Format("15:04:05.000"))
	}
	if r.l.Fence() <= l.Fence() {
		t.Fatalf("fence %d not above the lost lease's %d", r.l.Fence(), l.Fence())
	}
	t.Logf("holder lost its lease %v after ValidUntil; waiter granted %v after that", lostAt.Sub(vu).Round(time.Millisecond), r.at.Sub(lostAt).Round(time.Millisecond))
}

// The frozen-holder child: acquires, says HELD, waits for its lease to
// end, reports.
const frozenChildEnv = "FENCELOCK_DYNAMODB_FROZEN_CHILD"

func frozenChild(spec string) {
	url, n, _ := strings.Cut(spec, " ")
	ctx := context.Background()
	c, err := fencelock.Open(ctx, url)
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	fmt.Println("HELD", l.Fence())
	<-l.Done()
	fmt.Println("LOST", errors.Is(l.Err(), fencelock.ErrLeaseLost))
	fmt.Println("EXTEND", errors.Is(l.Extend(ctx, 0), fencelock.ErrLeaseLost))
	fmt.Println("RELEASE", errors.Is(l.Release(ctx), fencelock.ErrLeaseLost))
}

// TestFaultHolderFrozen: a holder process (this test binary, re-executed)
// is frozen with SIGSTOP past its lease. A waiter takes over only after
// watching the version unchanged for a full lease from its first read,
// with a higher fence; the resumed holder finds its lease lost, its
// Extend and Release fail with ErrLeaseLost, and its fenced write is
// rejected.
func TestFaultHolderFrozen(t *testing.T) {
	if spec := os.Getenv(frozenChildEnv); spec != "" {
		frozenChild(spec)
		os.Exit(0)
	}
	d := testserver.StartDynalite(t)
	rec := faultrec.Begin(t, faultrec.Result{Backend: "dynamodb", Scenario: faultrec.HolderPaused, Case: "TTL 600ms"})
	ctx := t.Context()
	n := name(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultHolderFrozen$", "-test.count=1")
	cmd.Env = append(os.Environ(), frozenChildEnv+"="+d.URL()+" "+n)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan []string, 8)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 {
				lines <- f
			}
		}
	}()
	next := func(want string) string {
		t.Helper()
		select {
		case f, ok := <-lines:
			if !ok || f[0] != want {
				t.Fatalf("child said %v, want %s", f, want)
			}
			return f[1]
		case <-time.After(30 * time.Second):
			t.Fatalf("child did not say %s", want)
		}
		return ""
	}
	cf, _ := strconv.ParseUint(next("HELD"), 10, 64)
	childFence := fencelock.Fence(cf)
	var res guard.Counter
	if _, err := res.Claim(ctx, childFence); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	rec.Note = "holder process frozen (SIGSTOP) for 2×TTL, waiter polling every 20ms: it took over after watching the version unchanged for a lease; the resumed holder's Extend and Release returned ErrLeaseLost; its fenced write was rejected"
	w := open(t, d.URL()+"&poll_interval=20ms", nil)
	start := time.Now()
	l, err := w.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: 10 * time.Second, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	took := time.Since(start)
	rec.WaitGranted, rec.WaitFrom = time.Since(stopped), "SIGSTOP"
	rec.Fence = faultrec.FenceOf(childFence, l.Fence())
	if took < 600*time.Millisecond {
		t.Fatalf("waiter took over %v after its first read, before the 600ms lease", took)
	}
	if l.Fence() <= childFence {
		t.Fatalf("waiter's fence %d not above the frozen holder's %d", l.Fence(), childFence)
	}
	v, err := res.Claim(ctx, l.Fence())
	if err != nil {
		t.Fatal(err)
	}
	if err := res.WriteClaimed(ctx, l.Fence(), v+1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(stopped.Add(1200 * time.Millisecond))) // the freeze lasts 2×TTL
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"LOST", "EXTEND", "RELEASE"} {
		if next(what) != "true" {
			t.Fatalf("resumed holder: %s did not report ErrLeaseLost", what)
		}
	}
	rec.Outcome = faultrec.Lost
	err = res.WriteClaimed(ctx, childFence, 1000)
	rec.SecondHolder = faultrec.OverlapOf(!errors.Is(err, guard.ErrStale))
	if !errors.Is(err, guard.ErrStale) {
		t.Fatalf("resumed holder's fenced write: %v, want guard.ErrStale", err)
	}
	if l.Err() != nil {
		t.Fatalf("waiter's lease ended after the stale holder resumed: %v", l.Err())
	}
	t.Logf("holder fence %d frozen; waiter took over %v after its first read with fence %d", childFence, took.Round(time.Millisecond), l.Fence())
}

// TestFaultClientPartitioned: the holder's client cut off from DynamoDB (a
// paused proxy in front of dynalite: connections stay open, no byte moves)
// while another client waits. The holder's heartbeats cannot arrive: its
// lease ends at its ValidUntil; the waiter, having watched the record
// version unchanged for a lease duration, takes over after that, with a
// higher fence; the stale holder's fenced write is rejected; after the
// heal its Release is ErrLeaseLost and leaves the new holder's lock alone.
func TestFaultClientPartitioned(t *testing.T) {
	d := testserver.StartDynalite(t)
	if d.Endpoint() == "" {
		testserver.SkipExternal(t, "DYNAMODB_URL names an existing server: the test needs a proxy in front of its own")
	}
	proxy, err := testserver.NewEtcdProxy(strings.TrimPrefix(d.Endpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	const ttl = 800 * time.Millisecond
	faulttest.ClientPartitioned(t, faulttest.Partition{
		Backend: "dynamodb",
		Cut:     open(t, strings.Replace(d.URL(), d.Endpoint(), "http://"+proxy.Addr(), 1), nil),
		Other:   open(t, d.URL()+"&poll_interval=20ms", nil),
		Pause:   proxy.Pause, Resume: proxy.Resume,
		Name: name(t), TTL: ttl,
		Wait:       &fencelock.AcquireOptions{TTL: 10 * time.Second, Wait: 20 * time.Second},
		LostWithin: ttl + margin, GrantWithin: 5*ttl + margin,
		Story: "holder behind a paused proxy, TTL %v, waiter polling every 20ms: the holder's lease ended locally %v after the cut; the waiter took over %v after the cut; the stale holder's fenced write was rejected",
	})
}

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
	if f, ok := out.Item["fence"].(*types.AttributeValueMemberN); !ok || f.Value != itoa(uint64(held.Fence())) {
		t.Fatalf("fence after restart = %#v, want %d: the item did not survive", out.Item["fence"], held.Fence())
	}
	if _, err := other.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire by another client after the restart: %v, want ErrNotAcquired", err)
	}
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
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := other.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
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
	if err := d.Proc.Resume(); err != nil {
		t.Fatal(err)
	}
	paused = false
	r := <-got
	if r.e != nil {
		t.Fatalf("waiter: %v", r.e)
	}
	defer r.l.Release(ctx)
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
	fmt.Println("HELD", uint64(l.Fence()))
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
	childFence, _ := strconv.ParseUint(next("HELD"), 10, 64)
	var res guard.Counter
	if _, err := res.Claim(ctx, childFence); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	w := open(t, d.URL()+"&poll_interval=20ms", nil)
	start := time.Now()
	l, err := w.Acquire(ctx, n, &fencelock.AcquireOptions{TTL: 10 * time.Second, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	took := time.Since(start)
	if took < 600*time.Millisecond {
		t.Fatalf("waiter took over %v after its first read, before the 600ms lease", took)
	}
	if l.Fence() <= fencelock.Fence(childFence) {
		t.Fatalf("waiter's fence %d not above the frozen holder's %d", l.Fence(), childFence)
	}
	v, err := res.Claim(ctx, uint64(l.Fence()))
	if err != nil {
		t.Fatal(err)
	}
	if err := res.WriteClaimed(ctx, uint64(l.Fence()), v+1); err != nil {
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
	if err := res.WriteClaimed(ctx, childFence, 1000); !errors.Is(err, guard.ErrStale) {
		t.Fatalf("resumed holder's fenced write: %v, want guard.ErrStale", err)
	}
	if l.Err() != nil {
		t.Fatalf("waiter's lease ended after the stale holder resumed: %v", l.Err())
	}
	t.Logf("holder fence %d frozen; waiter took over %v after its first read with fence %d", childFence, took.Round(time.Millisecond), l.Fence())
}

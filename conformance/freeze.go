package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
)

func init() {
	register(check{"ProcessFreeze", testProcessFreeze})
}

// freezeEnv carries the child's instructions when the process-freeze check
// re-executes the running binary.
const freezeEnv = "FENCELOCK_FREEZE_CHILD"

type freezeSpec struct {
	URL, Prefix, Name string
	TTL               time.Duration
}

// MaybeRunChild runs the process-freeze child and exits if this process was
// started as one; otherwise it returns at once. A binary that runs the suite
// without package testing (like the fencelock CLI) calls it first in main.
func MaybeRunChild() {
	if runFreezeChildIfRequested() {
		os.Exit(0)
	}
}

func runFreezeChildIfRequested() bool {
	v := os.Getenv(freezeEnv)
	if v == "" {
		return false
	}
	var s freezeSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		say("ERROR", "bad spec: "+err.Error())
		os.Exit(0)
	}
	freezeChild(s)
	os.Exit(0)
	return true
}

func say(words ...any) {
	fmt.Fprintln(os.Stdout, append([]any{"FREEZE"}, words...)...)
}

// freezeChild acquires with auto-renew on, is frozen by the parent, and
// reports what it observes once resumed.
func freezeChild(s freezeSpec) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*s.TTL+60*time.Second)
	defer cancel()
	c, err := fencelock.DefaultURLMux().Open(ctx, s.URL, &fencelock.Options{Prefix: s.Prefix})
	if err != nil {
		say("ERROR", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, s.Name, &fencelock.AcquireOptions{TTL: s.TTL})
	if err != nil {
		say("ERROR", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	say("ACQUIRED", uint64(l.Fence()))
	// The parent freezes this process (SIGSTOP) now, for 2×TTL.
	select {
	case <-l.Done():
	case <-time.After(20*s.TTL + 30*time.Second):
	}
	say("ENDED", errors.Is(l.Err(), fencelock.ErrLeaseLost))
	err = l.Release(ctx)
	say("RELEASE", errors.Is(err, fencelock.ErrLeaseLost))
	// A resumed worker that does not check its lease writes anyway: the
	// parent applies the write to the guarded resource with this fence.
	say("WRITE", uint64(l.Fence()))
}

// testProcessFreeze: a child process acquires (auto-renew on), is frozen
// with SIGSTOP for 2×TTL; the parent acquires with a higher fence and
// claims the guarded resource; the child, resumed, must find its lease
// lost, its Release must return ErrLeaseLost without touching the parent's
// lock, and its fenced write must be rejected.
func testProcessFreeze(t TB, e *env) {
	url := e.h.URL()
	if url == "" {
		t.Skipf("harness gives no URL for a second process")
	}
	bin, err := exe()
	mustNil(t, err, "os.Executable")
	var args []string
	if _, ok := t.(*testing.T); ok {
		top, _, _ := strings.Cut(t.Name(), "/")
		args = []string{"-test.run=^" + top + "$", "-test.count=1"}
	}
	name := e.name("x")
	spec, _ := json.Marshal(freezeSpec{URL: url, Prefix: e.prefix, Name: name, TTL: e.ttl})
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), freezeEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	mustNil(t, err, "StdoutPipe")
	mustNil(t, cmd.Start(), "start child")
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan []string, 8)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "FREEZE" {
				lines <- f[1:]
			}
		}
	}()
	next := func(want string) []string {
		t.Helper()
		select {
		case f, ok := <-lines:
			if !ok {
				t.Fatalf("child exited before %s", want)
			}
			if f[0] != want {
				t.Fatalf("child said %v, want %s", f, want)
			}
			return f
		case <-time.After(60 * time.Second):
			t.Fatalf("child did not say %s within 60s", want)
		}
		return nil
	}
	f := next("ACQUIRED")
	childFence, _ := strconv.ParseUint(f[1], 10, 64)
	var res guard.Counter
	_, err = res.Claim(e.ctx, childFence) // the child claimed the resource, then froze
	mustNil(t, err, "child's claim")

	mustNil(t, cmd.Process.Signal(syscall.SIGSTOP), "SIGSTOP child")
	stopped := time.Now()
	parent := e.client()
	l, err := parent.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: 2*e.ttl + e.margin})
	mustNil(t, err, "parent Acquire while the child is frozen")
	defer l.Release(e.ctx)
	grantedAfter := time.Since(stopped)
	e.checkFence(t, fencelock.Fence(childFence), l.Fence(), "parent's grant over the frozen child")
	v, err := res.Claim(e.ctx, uint64(l.Fence()))
	mustNil(t, err, "parent's claim")
	mustNil(t, res.WriteClaimed(e.ctx, uint64(l.Fence()), v+1), "parent's write")

	time.Sleep(time.Until(stopped.Add(2 * e.ttl))) // the freeze lasts 2×TTL
	mustNil(t, cmd.Process.Signal(syscall.SIGCONT), "SIGCONT child")
	resumed := time.Now()
	f = next("ENDED")
	lostAfter := time.Since(resumed)
	if f[1] != "true" {
		t.Fatalf("resumed child's lease did not end with ErrLeaseLost")
	}
	if f = next("RELEASE"); f[1] != "true" {
		t.Fatalf("resumed child's Release did not return ErrLeaseLost")
	}
	f = next("WRITE")
	wf, _ := strconv.ParseUint(f[1], 10, 64)
	err = res.WriteClaimed(e.ctx, wf, 1000)
	mustIs(t, err, guard.ErrStale, "resumed child's fenced write")
	if got, _ := res.Read(e.ctx); got != v+1 {
		t.Fatalf("resource value %d, want the parent's %d", got, v+1)
	}
	if l.Err() != nil {
		t.Fatalf("parent's lease ended after the child's stale Release: %v", l.Err())
	}
	_, err = e.client().TryAcquire(e.ctx, name, nil)
	mustIs(t, err, fencelock.ErrNotAcquired, "TryAcquire after the child's stale Release")
	t.Logf("child fence %d frozen at %v; parent granted fence %d %v later; child saw its lease lost %v after SIGCONT; its write was rejected",
		childFence, stopped.Format("15:04:05.000"), l.Fence(), grantedAfter.Round(time.Millisecond), lostAfter.Round(time.Millisecond))
}

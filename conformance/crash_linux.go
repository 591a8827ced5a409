//go:build linux

package conformance

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/faultrec"
)

// testProcessCrash: a child process (the running binary, re-executed as
// the process-freeze child) acquires with auto-renew on and is killed with
// SIGKILL: no Release, no goodbye to the store, its connections closed by
// the kernel. Another client must then be granted the lock within
// 2×TTL + margin, with a higher fence. The time it took is the store's
// crash-detection delay: a connection-bound lock (a Postgres session) is
// freed when the server sees the connection close, a TTL lock when its TTL
// runs out, a session lock when the session times out.
func testProcessCrash(t TB, e *env) {
	url := e.h.URL()
	if url == "" {
		t.Skipf("harness gives no URL for a second process")
	}
	rec := faultrec.Begin(t, faultrec.Result{Backend: e.caps.Backend, Scenario: faultrec.HolderCrashed})
	bin, err := exe()
	mustNil(t, err, "os.Executable")
	var args []string
	if r, ok := t.(*runT); ok && r.top != "" && r.test != nil {
		args = []string{"-test.run=^" + r.top + "$", "-test.count=1"}
	}
	name := e.name("x")
	spec, _ := json.Marshal(freezeSpec{URL: url, Prefix: e.prefix, Name: name, TTL: e.ttl})
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), freezeEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	mustNil(t, err, "StdoutPipe")
	mustNil(t, cmd.Start(), "start child")
	reaped := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-reaped
	})
	acquired := make(chan []string, 1)
	go func() {
		defer close(reaped)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "FREEZE" {
				select {
				case acquired <- f[1:]:
				default:
				}
			}
		}
		_ = cmd.Wait() // after the pipe's EOF, as os/exec requires
	}()
	e.waiting("the child process to acquire")
	var f []string
	select {
	case <-e.ctx.Done():
		t.Fatalf("check ended before the child acquired")
	case f = <-acquired:
	case <-time.After(60 * time.Second):
		t.Fatalf("child did not acquire within 60s")
	}
	if f[0] != "ACQUIRED" {
		t.Fatalf("child said %v, want ACQUIRED", f)
	}
	childFence, _ := strconv.ParseUint(f[1], 10, 64)

	mustNil(t, cmd.Process.Kill(), "SIGKILL child")
	killed := time.Now()
	e.waiting("the killed child to exit")
	select {
	case <-reaped:
	case <-e.ctx.Done():
		t.Fatalf("check ended before the killed child exited")
	}
	parent := e.client()
	e.waiting("the parent's Acquire of the crashed child's lock")
	l, err := parent.Acquire(e.ctx, name, &fencelock.AcquireOptions{TTL: longTTL, Wait: 2*e.effTTL() + e.margin})
	grantedAfter := time.Since(killed)
	mustNil(t, err, "Acquire of a lock whose holder was killed")
	defer l.Release(e.ctx)
	rec.Outcome = faultrec.Lost
	rec.WaitGranted, rec.WaitFrom = grantedAfter, "SIGKILL"
	rec.Fence = faultrec.FenceOf(childFence, uint64(l.Fence()))
	rec.Case = fmt.Sprintf("TTL %v", e.ttl)
	e.checkFence(t, fencelock.Fence(childFence), l.Fence(), "grant after the holder was killed")
	t.Logf("child holding fence %d killed; parent granted fence %d %v later (TTL %v, store TTL %v)",
		childFence, l.Fence(), grantedAfter.Round(time.Millisecond), e.ttl, e.storeTTL)
}

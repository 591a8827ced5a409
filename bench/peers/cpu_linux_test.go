//go:build linux

package peers

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// serverCPU counts a process and its children: a child that burns CPU
// must show up under its parent's PID.
func TestServerCPUCountsChildren(t *testing.T) {
	sh := exec.Command("sh", "-c", "sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done' & wait")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	pid := sh.Process.Pid
	before, ok := serverCPU([]int{pid})
	if !ok {
		t.Fatal("serverCPU of a running process: not ok")
	}
	var mid time.Duration
	deadline := time.Now().Add(10 * time.Second)
	for mid < before+50*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if mid, ok = serverCPU([]int{pid}); !ok {
			break // the child finished
		}
	}
	_ = sh.Wait()
	if mid < before+50*time.Millisecond {
		t.Fatalf("serverCPU rose from %v to %v while the child looped", before, mid)
	}
	if _, ok := serverCPU([]int{os.Getpid() + 1<<22}); ok {
		t.Fatal("serverCPU of a PID that does not exist: ok")
	}
}

// serverCPU keeps the CPU time of a child that exited and was reaped (a
// PostgreSQL session closed mid-run): the sum must not shrink.
func TestServerCPUKeepsReapedChildren(t *testing.T) {
	done := filepath.Join(t.TempDir(), "done")
	sh := exec.Command("sh", "-c", "sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'; touch "+done+"; sleep 60")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Process.Kill(); _ = sh.Wait() }()
	pid := sh.Process.Pid
	var during time.Duration
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if d, ok := serverCPU([]int{pid}); ok {
			during = max(during, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(done); err != nil {
		t.Fatal("the child did not finish in 20 s")
	}
	if during < 50*time.Millisecond {
		t.Fatalf("serverCPU saw only %v while the child looped", during)
	}
	after, ok := serverCPU([]int{pid})
	if !ok || after < during {
		t.Fatalf("serverCPU fell from %v to %v (ok %v) when the child exited", during, after, ok)
	}
}

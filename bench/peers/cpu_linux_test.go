//go:build linux

package peers

import (
	"os"
	"os/exec"
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

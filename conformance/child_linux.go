//go:build linux

package conformance

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
)

// holderChild is the running test binary re-executed as the process-freeze
// child (see freeze.go): it acquires name with auto-renew on and reports
// what happens to its lease as "FREEZE <word> <value>" lines on stdout.
// The process crash and freeze checks start it, then kill or stop it.
type holderChild struct {
	cmd    *exec.Cmd
	lines  chan []string // the fields after FREEZE; closed when stdout ends
	reaped chan struct{} // closed once the child exited and was waited for
	e      *env
}

// startHolderChild starts the child on name; at the check's cleanup it is
// resumed (if stopped), killed and reaped.
func startHolderChild(t TB, e *env, name string) *holderChild {
	return startChild(t, e, freezeSpec{Name: name})
}

// startChild starts the child on spec, its URL, Prefix and TTL (if zero)
// filled in from e.
func startChild(t TB, e *env, spec freezeSpec) *holderChild {
	bin, err := exe()
	mustNil(t, err, "os.Executable")
	var args []string
	if r, ok := t.(*runT); ok && r.top != "" && r.test != nil {
		args = []string{"-test.run=^" + r.top + "$", "-test.count=1"}
	}
	spec.URL, spec.Prefix = e.h.URL(), e.prefix
	if spec.TTL == 0 {
		spec.TTL = e.ttl
	}
	js, _ := json.Marshal(spec)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), freezeEnv+"="+string(js))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	mustNil(t, err, "StdoutPipe")
	mustNil(t, cmd.Start(), "start child")
	c := &holderChild{cmd: cmd, lines: make(chan []string, 8), reaped: make(chan struct{}), e: e}
	stop := make(chan struct{})
	go func() {
		defer close(c.reaped)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "FREEZE" {
				select {
				case c.lines <- f[1:]:
				case <-stop: // the check is over: read on to the end, unheard
				}
			}
		}
		close(c.lines)
		_ = cmd.Wait() // after the pipe's EOF, as os/exec requires
	}()
	t.Cleanup(func() {
		close(stop)
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-c.reaped
	})
	return c
}

// next returns the child's next report, failing the check unless its word
// is want or if none comes within 60s.
func (c *holderChild) next(t TB, want string) []string {
	t.Helper()
	c.e.waiting("the child process to say " + want)
	select {
	case <-c.e.ctx.Done():
		t.Fatalf("check ended before the child said %s", want)
	case f, ok := <-c.lines:
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

// parseFence reads a fence the child printed; 0 if it is not a number.
func parseFence(s string) fencelock.Fence {
	v, _ := strconv.ParseUint(s, 10, 64)
	return fencelock.Fence(v)
}

//go:build linux

package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// childWorkers: the nemesis can freeze a client process here.
const childWorkers = true

// startTortureChild re-executes the running binary (with args) as a
// torture child on url. It returns once the child opened its Client, or
// with an error (the child killed) if it did not within readyWithin.
func startTortureChild(url, prefix string, ttl time.Duration, args []string) (*childProc, error) {
	bin, err := exe()
	if err != nil {
		return nil, fmt.Errorf("torture child: %w", err)
	}
	js, _ := json.Marshal(freezeSpec{URL: url, Prefix: prefix, TTL: ttl, Torture: true})
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), freezeEnv+"="+string(js))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("torture child: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("torture child: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("torture child: start: %w", err)
	}
	reaped := make(chan struct{})
	p := &childProc{in: in, signal: cmd.Process.Signal, pid: cmd.Process.Pid,
		pending: map[int64]chan childMsg{}, leases: map[int64]*childLease{}, granted: make(chan struct{}), exited: make(chan struct{})}
	p.kill = func() {
		_ = in.Close()
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-reaped
	}
	ready := make(chan childMsg, 1)
	go func() {
		defer close(reaped)
		p.readLoop(out, ready)
		p.closeLeases()
		_ = cmd.Wait() // after the pipe's EOF, as os/exec requires
	}()
	select {
	case m := <-ready:
		if !m.Ready {
			p.kill()
			return nil, fmt.Errorf("torture child on %s: %s", url, m.Err)
		}
	case <-time.After(readyWithin):
		p.kill()
		return nil, fmt.Errorf("torture child on %s: not ready within %v (does the binary call conformance.MaybeRunChild first, or run the torture through RunTorture?)", url, readyWithin)
	}
	return p, nil
}

// freeze stops the child; thaw continues it.
func (p *childProc) freeze() error { return p.signal(syscall.SIGSTOP) }
func (p *childProc) thaw() error   { return p.signal(syscall.SIGCONT) }

package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Proc is one real server process that can be stopped, killed, paused and
// restarted with the same arguments, port and data dir.
type Proc struct {
	Name  string                          // for messages, e.g. "redis-server :6379"
	Path  string                          // binary
	Args  []string                        // arguments
	Dir   string                          // working dir
	Env   []string                        // extra environment
	Cred  *Credential                     // run as this user (postgres refuses root); nil: as us
	Ready func(ctx context.Context) error // polled until nil after each start

	mu     sync.Mutex
	cmd    *exec.Cmd
	out    *lockedWriter // stdout+stderr, for failure messages
	exited chan struct{}
	paused bool
}

// Start starts the process and waits until Ready returns nil, or ctx ends.
func (p *Proc) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.cmd != nil {
		p.mu.Unlock()
		return fmt.Errorf("testserver: %s already running", p.Name)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Dir = p.Dir
	cmd.Env = append(os.Environ(), p.Env...)
	out := &lockedWriter{w: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = procAttr(p.Cred, true)
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("testserver: start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.out, p.exited, p.paused = cmd, out, exited, false
	p.mu.Unlock()
	go func() { _ = cmd.Wait(); close(exited) }()
	if p.Ready == nil {
		return nil
	}
	for {
		err := p.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			p.mu.Lock()
			p.cmd = nil
			p.mu.Unlock()
			return fmt.Errorf("testserver: %s exited during start: %v\n%s", p.Name, err, tail(out))
		case <-ctx.Done():
			_ = p.Kill()
			return fmt.Errorf("testserver: %s not ready: %w (last: %v)\n%s", p.Name, ctx.Err(), err, tail(out))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// PID returns the running process's PID, or 0.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Pause stops the process with SIGSTOP (a frozen VM or long GC). Unix
// only: elsewhere it returns an error.
func (p *Proc) Pause() error { return p.signal(sigStop, true) }

// Resume continues a paused process with SIGCONT.
func (p *Proc) Resume() error { return p.signal(sigCont, false) }

func (p *Proc) signal(sig Signal, paused bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("testserver: %s not running", p.Name)
	}
	if err := signalGroup(p.cmd.Process.Pid, sig); err != nil {
		return err
	}
	p.paused = paused
	return nil
}

// Stop ends the process gracefully (SIGTERM, then SIGKILL after 10s).
func (p *Proc) Stop() error { return p.end(sigTerm, 10*time.Second) }

// Kill ends the process at once with SIGKILL (a crash).
func (p *Proc) Kill() error { return p.end(sigKill, 0) }

func (p *Proc) end(sig Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, exited, paused := p.cmd, p.exited, p.paused
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pid := cmd.Process.Pid
	_ = signalGroup(pid, sig)
	if paused {
		_ = signalGroup(pid, sigCont)
	}
	if grace > 0 {
		select {
		case <-exited:
			return nil
		case <-time.After(grace):
		}
	}
	_ = signalGroup(pid, sigKill)
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("testserver: " + p.Name + " did not exit after SIGKILL")
	}
}

// Restart stops the process (gracefully) and starts it again with the same
// arguments and data dir.
func (p *Proc) Restart(ctx context.Context) error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.Start(ctx)
}

// Output returns the tail of the process's output, for failure messages.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out == nil {
		return ""
	}
	return tail(p.out)
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Len() > 1<<20 {
		l.w.Reset()
	}
	return l.w.Write(b)
}

func tail(l *lockedWriter) string {
	l.mu.Lock()
	s := l.w.String()
	l.mu.Unlock()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

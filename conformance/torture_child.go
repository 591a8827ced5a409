package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// A torture worker whose lock Client lives in a child process (the
// running binary re-executed, as the process-freeze child is), so that the
// nemesis can freeze the Client with SIGSTOP. The parent drives it over a
// line protocol, one JSON object a line: commands on the child's stdin,
// replies and lease events on its stdout, each stdout line prefixed with
// childPrefix. The parent records every operation on its own clock and
// does the guarded register writes itself, with the fence the child
// reported, after the child's reply.

const childPrefix = "TORTURE "

// childCmd is one command to the child.
type childCmd struct {
	ID      int64         `json:"id"`
	Op      string        `json:"op"` // try, acquire, extend, release, ping
	Name    string        `json:"name,omitempty"`
	Lease   int64         `json:"lease,omitempty"` // extend, release: the child's lease number
	TTL     time.Duration `json:"ttl,omitempty"`
	Wait    time.Duration `json:"wait,omitempty"`
	Renew   bool          `json:"renew,omitempty"`
	Timeout time.Duration `json:"timeout"` // the operation's ctx, from the child's receipt of the command
}

// childMsg is one line from the child: a reply (ID set), a lease event
// (Ev set), or the first line (Ready or a fatal Err).
type childMsg struct {
	ID    int64  `json:"id,omitempty"`
	Ready bool   `json:"ready,omitempty"`
	Ev    string `json:"ev,omitempty"`  // "valid": ValidUntil moved (auto-renew); "done": the lease ended
	Res   string `json:"res,omitempty"` // classify of the error: ok, refused, lost, ctx, error
	Err   string `json:"err,omitempty"`
	Lease int64  `json:"lease,omitempty"`
	Fence uint64 `json:"fence,omitempty"`
	// VU is the lease's ValidUntil as an offset on the child's monotonic
	// clock: from the child's receipt of the command (replies), or from
	// the moment the event was sent (events). A reply's offset added to
	// the parent's send time is never later than the child's deadline.
	VU time.Duration `json:"vu,omitempty"`
}

// tortureChild serves torture commands on stdin until it closes, with a
// Client on s.URL.
func tortureChild(s freezeSpec) {
	out := &childOut{w: bufio.NewWriter(os.Stdout)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := fencelock.DefaultURLMux().Open(ctx, s.URL, &fencelock.Options{Prefix: s.Prefix})
	if err != nil {
		out.send(childMsg{Err: err.Error()})
		return
	}
	defer c.Close()
	ch := &childServer{c: c, out: out, leases: map[int64]*fencelock.Lease{}, poll: max(5*time.Millisecond, s.TTL/8)}
	out.send(childMsg{Ready: true})
	sc := bufio.NewScanner(os.Stdin)
	var wg sync.WaitGroup
	for sc.Scan() {
		var cmd childCmd
		if err := json.Unmarshal(sc.Bytes(), &cmd); err != nil {
			out.send(childMsg{Err: "bad command: " + err.Error()})
			continue
		}
		got := time.Now()
		wg.Go(func() { ch.do(ctx, cmd, got) })
	}
	cancel()
	wg.Wait()
}

// childOut serialises the child's stdout lines.
type childOut struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *childOut) send(m childMsg) {
	b, _ := json.Marshal(m)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.WriteString(childPrefix)
	o.w.Write(b)
	o.w.WriteByte('\n')
	o.w.Flush()
}

type childServer struct {
	c    *fencelock.Client
	out  *childOut
	poll time.Duration

	mu     sync.Mutex
	next   int64
	leases map[int64]*fencelock.Lease
}

func (ch *childServer) do(ctx context.Context, cmd childCmd, got time.Time) {
	octx, cancel := context.WithTimeout(ctx, cmd.Timeout-time.Since(got))
	defer cancel()
	rep := childMsg{ID: cmd.ID}
	var err error
	switch cmd.Op {
	case "try", "acquire":
		ao := &fencelock.AcquireOptions{TTL: cmd.TTL, Wait: cmd.Wait, AutoRenew: fencelock.Bool(cmd.Renew)}
		var l *fencelock.Lease
		if cmd.Op == "try" {
			l, err = ch.c.TryAcquire(octx, cmd.Name, ao)
		} else {
			l, err = ch.c.Acquire(octx, cmd.Name, ao)
		}
		if err == nil {
			ch.mu.Lock()
			ch.next++
			rep.Lease = ch.next
			ch.leases[rep.Lease] = l
			ch.mu.Unlock()
			rep.Fence, rep.VU = uint64(l.Fence()), l.ValidUntil().Sub(got)
			go ch.watch(ctx, rep.Lease, l)
		}
	case "extend", "release":
		ch.mu.Lock()
		l := ch.leases[cmd.Lease]
		ch.mu.Unlock()
		switch {
		case l == nil:
			err = fmt.Errorf("%w: no lease %d in the child", fencelock.ErrInvalid, cmd.Lease)
		case cmd.Op == "extend":
			err = l.Extend(octx, cmd.TTL)
			rep.VU = l.ValidUntil().Sub(got)
		default:
			err = l.Release(octx)
			ch.mu.Lock()
			delete(ch.leases, cmd.Lease)
			ch.mu.Unlock()
		}
	case "ping":
	default:
		err = fmt.Errorf("%w: unknown op %q", fencelock.ErrInvalid, cmd.Op)
	}
	rep.Res, rep.Err = classify(err), errText(err)
	ch.out.send(rep)
}

// watch reports l's ValidUntil as auto-renew moves it, then its end.
func (ch *childServer) watch(ctx context.Context, id int64, l *fencelock.Lease) {
	t := time.NewTicker(ch.poll)
	defer t.Stop()
	last := l.ValidUntil()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.Done():
			ch.out.send(childMsg{Ev: "done", Lease: id, VU: time.Until(l.ValidUntil()), Res: classify(l.Err()), Err: errText(l.Err())})
			return
		case <-t.C:
			if vu := l.ValidUntil(); !vu.Equal(last) {
				last = vu
				ch.out.send(childMsg{Ev: "valid", Lease: id, VU: time.Until(vu)})
			}
		}
	}
}

// childProc is the parent's side of a torture child: a locker whose
// leases live in the child.
type childProc struct {
	in     io.WriteCloser
	signal func(os.Signal) error
	kill   func()
	pid    int

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan childMsg
	leases  map[int64]*childLease
	granted chan struct{} // closed (and replaced) at each grant
	exited  chan struct{} // closed when the child's stdout ended
}

// ping returns once the child answered a no-op: the worker's
// application code runs only while the child runs, as if it were in
// the child (a frozen child's register write happens after it resumes).
func (p *childProc) ping(ctx context.Context) {
	_, _, _ = p.call(ctx, childCmd{Op: "ping"})
}

// waitHolding returns once the child holds a lease (as far as the
// parent knows), or after d.
func (p *childProc) waitHolding(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		p.mu.Lock()
		n, ch := len(p.leases), p.granted
		p.mu.Unlock()
		if n > 0 {
			return
		}
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		case <-p.exited:
			return
		}
	}
}

var errChildGone = errors.New("torture child process exited")

// readLoop dispatches the child's lines until its stdout ends; ready
// gets the first line.
func (p *childProc) readLoop(r io.Reader, ready chan<- childMsg) {
	defer close(p.exited)
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		line, ok := bytesCutPrefix(sc.Bytes(), childPrefix)
		if !ok {
			continue
		}
		at := time.Now()
		var m childMsg
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if first {
			first = false
			ready <- m
			continue
		}
		p.mu.Lock()
		switch {
		case m.ID != 0:
			if ch := p.pending[m.ID]; ch != nil {
				delete(p.pending, m.ID)
				ch <- m
			}
		case m.Ev != "":
			if l := p.leases[m.Lease]; l != nil {
				l.event(m, at)
				if m.Ev == "done" {
					delete(p.leases, m.Lease)
				}
			}
		}
		p.mu.Unlock()
	}
	if first {
		ready <- childMsg{Err: "the child exited before it was ready"}
	}
}

func bytesCutPrefix(b []byte, prefix string) ([]byte, bool) {
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return nil, false
	}
	return b[len(prefix):], true
}

// call sends cmd and returns the child's reply and when the command was
// sent. It waits for the reply even past ctx's deadline (the child's
// operation ends by that deadline on the child's clock, but a frozen
// child replies only once resumed: the reply says what happened); only
// the child's exit ends the wait.
func (p *childProc) call(ctx context.Context, cmd childCmd) (childMsg, time.Time, error) {
	cmd.Timeout = time.Hour
	if d, ok := ctx.Deadline(); ok {
		cmd.Timeout = time.Until(d)
	}
	ch := make(chan childMsg, 1)
	p.mu.Lock()
	p.nextID++
	cmd.ID = p.nextID
	p.pending[cmd.ID] = ch
	p.mu.Unlock()
	b, _ := json.Marshal(cmd)
	sent := time.Now()
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return childMsg{}, sent, fmt.Errorf("%w: %v", errChildGone, err)
	}
	select {
	case m := <-ch:
		return m, sent, nil
	case <-p.exited:
		return childMsg{}, sent, errChildGone
	}
}

// replyErr rebuilds an error that classify names as the child did.
func replyErr(m childMsg) error {
	var base error
	switch m.Res {
	case "ok":
		return nil
	case "refused":
		base = fencelock.ErrNotAcquired
	case "lost":
		base = fencelock.ErrLeaseLost
	case "ctx":
		base = context.DeadlineExceeded
	default:
		return fmt.Errorf("child: %s", m.Err)
	}
	return fmt.Errorf("child: %s: %w", m.Err, base)
}

func (p *childProc) TryAcquire(ctx context.Context, name string, ao *fencelock.AcquireOptions) (tortureLease, error) {
	return p.acquire(ctx, "try", name, ao)
}

func (p *childProc) Acquire(ctx context.Context, name string, ao *fencelock.AcquireOptions) (tortureLease, error) {
	return p.acquire(ctx, "acquire", name, ao)
}

func (p *childProc) acquire(ctx context.Context, op, name string, ao *fencelock.AcquireOptions) (tortureLease, error) {
	cmd := childCmd{Op: op, Name: name, TTL: ao.TTL, Wait: ao.Wait, Renew: ao.AutoRenew == nil || *ao.AutoRenew}
	m, sent, err := p.call(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if err := replyErr(m); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &childLease{p: p, num: m.Lease, fence: fencelock.Fence(m.Fence), validUntil: sent.Add(m.VU), ctx: lctx, cancel: cancel}
	p.mu.Lock()
	select {
	case <-p.exited:
		l.end(errChildGone, l.validUntil)
	default:
		p.leases[m.Lease] = l
		close(p.granted)
		p.granted = make(chan struct{})
	}
	p.mu.Unlock()
	return l, nil
}

// closeLeases ends every lease the child held (it exited).
func (p *childProc) closeLeases() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, l := range p.leases {
		l.end(errChildGone, time.Now())
		delete(p.leases, id)
	}
}

// childLease is the parent's view of a lease held in the child.
type childLease struct {
	p      *childProc
	num    int64
	fence  fencelock.Fence
	ctx    context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	validUntil time.Time
	err        error
}

func (l *childLease) Fence() fencelock.Fence     { return l.fence }
func (l *childLease) Context() context.Context   { return l.ctx }
func (l *childLease) ValidUntil() time.Time      { l.mu.Lock(); defer l.mu.Unlock(); return l.validUntil }
func (l *childLease) Err() error                 { l.mu.Lock(); defer l.mu.Unlock(); return l.err }
func (l *childLease) setValidUntil(vu time.Time) { l.mu.Lock(); l.validUntil = vu; l.mu.Unlock() }
func (l *childLease) Release(ctx context.Context) error {
	return l.op(ctx, childCmd{Op: "release", Lease: l.num})
}

func (l *childLease) Extend(ctx context.Context, ttl time.Duration) error {
	return l.op(ctx, childCmd{Op: "extend", Lease: l.num, TTL: ttl})
}

func (l *childLease) op(ctx context.Context, cmd childCmd) error {
	if cmd.Op == "extend" {
		// As the child's Lease does when it sends the renewal: a shorter
		// TTL moves the deadline earlier at once.
		l.mu.Lock()
		if vu := time.Now().Add(cmd.TTL); vu.Before(l.validUntil) {
			l.validUntil = vu
		}
		l.mu.Unlock()
	}
	m, sent, err := l.p.call(ctx, cmd)
	if err != nil {
		return err
	}
	err = replyErr(m)
	switch {
	case cmd.Op == "release":
		l.end(fencelock.ErrReleased, l.ValidUntil())
	case err == nil || m.VU != 0:
		l.setValidUntil(sent.Add(m.VU))
	}
	return err
}

// event applies a lease event received at at.
func (l *childLease) event(m childMsg, at time.Time) {
	switch m.Ev {
	case "valid":
		l.setValidUntil(at.Add(m.VU))
	case "done":
		err := replyErr(m)
		if err == nil {
			err = fencelock.ErrReleased
		}
		l.end(err, at.Add(m.VU))
	}
}

// end records the lease's end (the first one counts) and ends its
// Context.
func (l *childLease) end(err error, validUntil time.Time) {
	l.mu.Lock()
	if l.err == nil {
		l.err, l.validUntil = err, validUntil
	}
	l.mu.Unlock()
	l.cancel()
}

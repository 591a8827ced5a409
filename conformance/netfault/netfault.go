// Package netfault is a userspace TCP proxy that injects network faults
// between a client and one server address: it passes bytes, holds them (a
// blackhole: connections stay open, nothing moves), resets every
// connection (and refuses new ones), or delays every chunk. The
// conformance suite puts one Proxy in front of each store address of one
// client (see fencelock.AddrRewriter), so that `fencelock conformance
// --url` partitions a holder from a deployed store with no netem, no root
// and nothing outside the test process.
//
// A blackhole is what a partition looks like to both ends while TCP is
// still retransmitting: the server sees an idle connection, the client an
// unanswered request; bytes held are delivered in order when the fault
// heals (as retransmission would). A reset is what a middlebox, a crashed
// NAT entry or a restarted peer does: both sides see the connection end
// (RST), and new connections are refused until the heal.
package netfault

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Mode is what a Proxy does to the bytes and connections through it.
type Mode int

const (
	// Pass forwards bytes both ways.
	Pass Mode = iota
	// Blackhole holds every byte, both ways, and every new connection,
	// until the mode changes; nothing is closed.
	Blackhole
	// Reset closes every connection with a TCP reset on both sides, and
	// resets new connections at once, until the mode changes.
	Reset
	// Latency delays every chunk of bytes, each way, by the Proxy's delay.
	Latency
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	case Latency:
		return "latency"
	}
	return "unknown"
}

// Proxy forwards connections from a 127.0.0.1 listener to one target
// address, with the fault of its Mode. Its methods are safe for
// concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	mode    Mode
	delay   time.Duration
	changed chan struct{} // closed and replaced at every mode change
	links   map[*link]struct{}
	closed  bool
	accepts int // connections accepted, ever
	wg      sync.WaitGroup
}

// link is one proxied connection: the client's side and the target's.
type link struct {
	down net.Conn // accepted from the client
	up   net.Conn // dialed to the target; nil until dialed
}

// Listen starts a Proxy to target (host:port) on a free 127.0.0.1 port,
// in mode Pass.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address (host:port) for clients.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Accepted returns how many connections the proxy has accepted so far:
// a client that never came through it was not behind it.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// Set changes the mode. delay is used by Latency (ignored otherwise).
// Leaving Blackhole delivers the bytes held, in order; entering Reset
// resets every open connection before Set returns.
func (p *Proxy) Set(m Mode, delay time.Duration) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.mode, p.delay = m, delay
	close(p.changed)
	p.changed = make(chan struct{})
	var reset []*link
	if m == Reset {
		for l := range p.links {
			reset = append(reset, l)
			delete(p.links, l)
		}
	}
	p.mu.Unlock()
	for _, l := range reset {
		l.reset()
	}
}

// Heal is Set(Pass, 0).
func (p *Proxy) Heal() { p.Set(Pass, 0) }

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.changed)
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	err := p.ln.Close()
	for l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

// state returns the mode, the delay and a channel closed at the next
// change; closed reports that the proxy is closed.
func (p *Proxy) state() (m Mode, delay time.Duration, changed <-chan struct{}, closed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay, p.changed, p.closed
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepts++
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects one accepted connection to the target, once the mode
// lets it (a blackhole holds it, a reset refuses it), and pipes bytes.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	l := &link{down: c}
	for {
		m, _, changed, closed := p.state()
		if closed || m == Reset {
			l.reset()
			return
		}
		if m != Blackhole {
			break
		}
		if !p.track(l) { // held: a Reset or Close must reach it
			return
		}
		<-changed
		if !p.untrack(l) { // reset or closed meanwhile
			return
		}
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		l.reset()
		return
	}
	l.up = up
	if !p.track(l) {
		l.close()
		return
	}
	p.wg.Add(2)
	go p.pipe(l, up, c)
	go p.pipe(l, c, up)
}

// track adds l to the open links; it reports false (and closes l) if the
// proxy is closed or resetting.
func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == Reset {
		go l.reset()
		return false
	}
	p.links[l] = struct{}{}
	return true
}

// untrack removes l; it reports false if l was already removed (reset or
// closed by the proxy).
func (p *Proxy) untrack(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.links[l]; !ok {
		return false
	}
	delete(p.links, l)
	return true
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst with the proxy's fault: a reader stamps each
// chunk with its due time (now + the delay in Latency mode), a writer
// holds it while the mode is Blackhole and writes it when due. When
// either side ends, the link is closed.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if !p.hold(c.due) {
				return
			}
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			m, delay, _, _ := p.state()
			c := chunk{b: append([]byte(nil), buf[:n]...)}
			if m == Latency {
				c.due = time.Now().Add(delay)
			}
			select {
			case q <- c:
			case <-done:
				err = errors.New("writer ended")
			}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
	if p.untrack(l) {
		l.close()
	}
}

// hold waits while the mode is Blackhole and until due; it reports false
// if the proxy closed.
func (p *Proxy) hold(due time.Time) bool {
	for {
		m, _, changed, closed := p.state()
		if closed {
			return false
		}
		if m == Blackhole {
			<-changed
			continue
		}
		d := time.Until(due)
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
			return true
		case <-changed:
			t.Stop()
		}
	}
}

// reset closes both sides with a TCP reset (SO_LINGER 0).
func (l *link) reset() {
	for _, c := range []net.Conn{l.down, l.up} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		if c != nil {
			_ = c.Close()
		}
	}
}

// close closes both sides.
func (l *link) close() {
	_ = l.down.Close()
	if l.up != nil {
		_ = l.up.Close()
	}
}

package testserver

import (
	"net"
	"sync"
)

// EtcdProxy is a userspace TCP proxy on a free 127.0.0.1 port in front of
// one server address. Pause makes it a silent network partition for the
// clients behind it: connections stay open but no byte moves either way
// (and no new connection is served) until Resume. netem is not needed.
type EtcdProxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	paused bool
	resume chan struct{} // closed by Resume
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewEtcdProxy starts a proxy to target (host:port).
func NewEtcdProxy(target string) (*EtcdProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &EtcdProxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, resume: make(chan struct{})}
	close(p.resume)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address (host:port) for clients.
func (p *EtcdProxy) Addr() string { return p.ln.Addr().String() }

// Pause stops all traffic through the proxy, leaving connections open.
func (p *EtcdProxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused = true
		p.resume = make(chan struct{})
	}
}

// Resume lets traffic through again (held bytes are delivered).
func (p *EtcdProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resume)
	}
}

// gate blocks while paused; it reports false once the proxy is closed.
func (p *EtcdProxy) gate() bool {
	p.mu.Lock()
	ch, closed := p.resume, p.closed
	p.mu.Unlock()
	if closed {
		return false
	}
	<-ch
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

// Close stops the proxy and cuts every connection.
func (p *EtcdProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.paused {
		p.paused = false
		close(p.resume)
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *EtcdProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *EtcdProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if !p.gate() {
				_ = c.Close()
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil || !p.track(up) {
				_ = c.Close()
				if up != nil {
					_ = up.Close()
				}
				return
			}
			p.wg.Add(2)
			go p.pipe(up, c)
			go p.pipe(c, up)
		}()
	}
}

// pipe copies src to dst, holding data while paused; at the end it closes
// both sides.
func (p *EtcdProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

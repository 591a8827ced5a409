package redisx

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Sub is one pub/sub connection shared by a backend's waiters. Subscribe,
// Unsubscribe and Ping queue commands that one writer goroutine sends in
// the order they were queued, so the reply to a PING proves that every
// SUBSCRIBE queued before it is in effect on the server; one reader
// goroutine hands what arrives to the Handlers. No method blocks on the
// network, and the Handlers are never called with Sub's own lock held, so
// a caller may queue commands under its own lock that its handlers take.
type Sub struct {
	h       Handlers
	ps      *goredis.PubSub
	closing chan struct{}
	kick    chan struct{} // cap 1: commands queued for the writer
	wg      sync.WaitGroup

	mu     sync.Mutex
	ops    []subOp
	closed bool
}

// Handlers receive what a Sub's connection brings.
type Handlers struct {
	// Message is called with each published message.
	Message func(channel, payload string)
	// Pong is called with the payload of each PING reply.
	Pong func(payload string)
	// Broken is called when a read or a write fails: go-redis reconnects
	// and subscribes again on the next read, and what was published
	// meanwhile, and any PING reply pending, is lost.
	Broken func()
	// Tick, if not nil, is called every TickEvery from the writer.
	Tick      func()
	TickEvery time.Duration
}

type subOp struct {
	kind byte // 's' SUBSCRIBE, 'u' UNSUBSCRIBE, 'p' PING
	args []string
}

// NewSub opens a pub/sub connection of client (lazily: it dials with the
// first command) and starts its writer and reader.
func NewSub(client goredis.UniversalClient, h Handlers) *Sub {
	s := &Sub{h: h, ps: client.Subscribe(context.Background()), closing: make(chan struct{}), kick: make(chan struct{}, 1)}
	s.wg.Add(2)
	go s.write()
	go s.read()
	return s
}

// Subscribe queues a SUBSCRIBE of channels.
func (s *Sub) Subscribe(channels ...string) { s.queue(subOp{'s', channels}) }

// Unsubscribe queues an UNSUBSCRIBE of channels.
func (s *Sub) Unsubscribe(channels ...string) { s.queue(subOp{'u', channels}) }

// Ping queues a PING whose reply carries payload.
func (s *Sub) Ping(payload string) { s.queue(subOp{'p', []string{payload}}) }

func (s *Sub) queue(op subOp) {
	s.mu.Lock()
	if !s.closed {
		s.ops = append(s.ops, op)
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Close stops the writer and the reader and closes the connection. The
// Handlers are not called after it returns.
func (s *Sub) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.ops = nil
	s.mu.Unlock()
	close(s.closing)
	_ = s.ps.Close()
	s.wg.Wait()
}

// write is the writer goroutine: it sends queued commands in order. A
// command that fails (the connection is broken or closing) is dropped
// after Broken is called: whoever waits for its effect must start again.
func (s *Sub) write() {
	defer s.wg.Done()
	ctx := context.Background()
	var tick <-chan time.Time
	if s.h.Tick != nil {
		t := time.NewTicker(s.h.TickEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.closing:
			return
		case <-tick:
			s.h.Tick()
			continue
		case <-s.kick:
		}
		s.mu.Lock()
		ops := s.ops
		s.ops = nil
		s.mu.Unlock()
		for _, op := range ops {
			var err error
			switch op.kind {
			case 's':
				err = s.ps.Subscribe(ctx, op.args...)
			case 'u':
				err = s.ps.Unsubscribe(ctx, op.args...)
			case 'p':
				err = s.ps.Ping(ctx, op.args[0])
			}
			if err != nil && !s.isClosing() {
				s.h.Broken()
			}
		}
	}
}

// read is the reader goroutine. After a failed read it calls Broken and
// waits a backoff (5 ms doubling to 1 s) before reading again.
func (s *Sub) read() {
	defer s.wg.Done()
	ctx := context.Background()
	var backoff time.Duration
	for {
		msg, err := s.ps.Receive(ctx)
		if err != nil {
			if s.isClosing() {
				return
			}
			s.h.Broken()
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-s.closing:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		switch m := msg.(type) {
		case *goredis.Message:
			s.h.Message(m.Channel, m.Payload)
		case *goredis.Pong:
			s.h.Pong(m.Payload)
		}
	}
}

func (s *Sub) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

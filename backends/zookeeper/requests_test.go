package zookeeper_test

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/zookeeper"
)

// ZooKeeper opcodes seen by the tests.
const (
	opCreate       = 1
	opDelete       = 2
	opPing         = 11
	opGetChildren2 = 12
)

// opsConn counts the requests a client writes (by opcode) and, while hold
// is set, holds back the server's answers after a create is written until
// a getChildren2 request is written too, or for at most holdMax: a read
// sent only after the create's answer makes the hold run out.
type opsConn struct {
	net.Conn
	w         *opsWatch
	connected bool // the connect request is written
}

type opsWatch struct {
	mu       sync.Mutex
	ops      map[int32]int // pings left out
	hold     bool
	waiting  chan struct{} // closed when the awaited getChildren2 is written
	timeouts int
}

const holdMax = 2 * time.Second

func (c *opsConn) Write(p []byte) (int, error) {
	w := c.w
	w.mu.Lock()
	if !c.connected {
		c.connected = true
	} else if op := int32(binary.BigEndian.Uint32(p[8:12])); op != opPing {
		w.ops[op]++
		switch {
		case op == opCreate && w.hold && w.waiting == nil:
			w.waiting = make(chan struct{})
		case op == opGetChildren2 && w.waiting != nil:
			close(w.waiting)
			w.waiting = nil
		}
	}
	w.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *opsConn) Read(p []byte) (int, error) {
	w := c.w
	w.mu.Lock()
	ch := w.waiting
	w.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-time.After(holdMax):
			w.mu.Lock()
			w.timeouts++
			if w.waiting == ch {
				w.waiting = nil
			}
			w.mu.Unlock()
		}
	}
	return c.Conn.Read(p)
}

// An uncontended TryAcquire + Release sends three requests, as
// go-zookeeper's zk.Lock does (create, getChildren2, delete: the fence
// comes with the read), and the read goes out before the create's answer
// is in (one round trip for both).
func TestAcquireReleaseRequests(t *testing.T) {
	w := &opsWatch{ops: map[int32]int{}}
	cfg := &zookeeper.Config{Servers: servers(t, sharedURL(t)), Root: root, Dialer: func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &opsConn{Conn: c, w: w}, nil
	}}
	ctx := t.Context()
	c, err := zookeeper.New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := name(t)
	o := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	cycle := func(ctx context.Context) {
		l, err := c.TryAcquire(ctx, n, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle(ctx) // connects the session, makes the lock path
	const cycles = 5
	w.mu.Lock()
	clear(w.ops)
	w.hold = true
	w.mu.Unlock()
	for range cycles {
		cycle(ctx)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	want := map[int32]int{opCreate: cycles, opGetChildren2: cycles, opDelete: cycles}
	if len(w.ops) != len(want) || w.ops[opCreate] != cycles || w.ops[opGetChildren2] != cycles || w.ops[opDelete] != cycles {
		t.Errorf("requests by opcode in %d cycles: %v, want %v", cycles, w.ops, want)
	}
	if w.timeouts > 0 {
		t.Errorf("%d of %d reads of the queue were sent only after the create's answer", w.timeouts, cycles)
	}
}

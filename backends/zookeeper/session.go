package zookeeper

// Sessions and TTLs (internals; the package doc in doc.go has what users need).
//
// A lease lives as long as its ephemeral node, which lives as long as the
// ZooKeeper session that created it. The leases of one Client share one
// session per TTL class: a lease with TTL t uses a session whose requested
// timeout is t (or Config.SessionTimeout, the session_timeout URL
// parameter, for every t up to it), so 10,000 leases with one TTL are one
// session and one heartbeat stream. The server grants a session timeout
// between its minSessionTimeout and maxSessionTimeout (2 and 20 tickTimes
// by default); the backend reads the granted one from the connect response.
// MinTTL is the server's minSessionTimeout, read when the backend is made.
// Sessions stay open (idle ones cost a ping every third of their timeout)
// until the Client is closed.
//
// The session keeps our node while the client process runs, so the TTL is
// also enforced by the client: a lease not renewed for its TTL has its
// node deleted by the backend (the lock then frees as a store-side TTL
// would free it). When the process dies or freezes, or is partitioned from
// the ensemble, the server expires the session one session timeout after
// it last heard from it and deletes the node. Lease.StoreTTL (GrantedTTL)
// is the longer of the two: how long others may wait for an abandoned
// lock.
//
// Renewal (Extend and auto-renew) is one read of our node: it proves that
// the session was alive when the read was sent (so the server keeps it at
// least a session timeout past that) and that the node still exists, owned
// by our session, with a czxid no greater than our fence (a node of the
// same path made after ours has a greater one). ErrLeaseLost otherwise.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// session is one ZooKeeper session (one go-zookeeper connection) shared by
// every lease of one TTL class of a backend: one heartbeat stream however
// many leases it carries.
type session struct {
	b       *backend
	timeout time.Duration // requested session timeout
	conn    *zk.Conn
	ready   chan struct{} // closed at the first established session

	mu         sync.Mutex
	id         int64         // current session ID (0 before the first, or after expiry)
	passwd     []byte        // current session password
	negotiated time.Duration // the session timeout the server granted
	leases     map[*lease]struct{}
	wake       chan struct{} // closed and replaced at every session event
	readyOnce  sync.Once

	authMu sync.Mutex
	authed bool

	dials   atomic.Int64 // connections made
	killing atomic.Bool  // kill in progress: do not reconnect yet

	// Create requests whose writing is awaited (see expectCreate).
	expectMu  sync.Mutex
	expect    map[string]chan struct{}
	expecting atomic.Int32 // len(expect), read without the lock
}

// errKilling: a reconnection attempt while KillSessions closes the session.
var errKilling = errors.New("zookeeper: session being closed by KillSessions")

// reconnectHold is how long a reconnection holds back its first request
// (see sniffConn).
const reconnectHold = 50 * time.Millisecond

// sessionFor returns the session of the TTL class of ttl, connecting it if
// needed, once it has an established ZooKeeper session.
func (b *backend) sessionFor(ctx context.Context, ttl time.Duration) (*session, error) {
	timeout := ttl
	if b.sessionTimeout > 0 && ttl <= b.sessionTimeout {
		timeout = b.sessionTimeout
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, driver.ErrClosed
	}
	s := b.sessions[timeout]
	if s == nil {
		var err error
		if s, err = b.connect(timeout); err != nil {
			b.mu.Unlock()
			return nil, err
		}
		b.sessions[timeout] = s
	}
	b.mu.Unlock()
	select {
	case <-s.ready:
		return s, s.authenticate(ctx)
	default:
	}
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	select {
	case <-s.ready:
		return s, s.authenticate(ctx)
	case <-ctx.Done():
		return nil, b.fail(ctx, "connect", ctx.Err())
	case <-t.C:
		return nil, fmt.Errorf("%w: zookeeper: no session with any of %v within %v", driver.ErrUnavailable, b.servers, b.timeout)
	}
}

// connect starts a go-zookeeper connection for a new session; b.mu is held.
func (b *backend) connect(timeout time.Duration) (*session, error) {
	s := &session{b: b, timeout: timeout, ready: make(chan struct{}), leases: map[*lease]struct{}{}, wake: make(chan struct{})}
	dial := func(network, addr string, to time.Duration) (net.Conn, error) {
		if s.killing.Load() {
			return nil, errKilling
		}
		c, err := b.dial(network, addr, to)
		if err != nil {
			return nil, err
		}
		sc := &sniffConn{Conn: c, onConnect: s.onConnect, onWrite: s.written}
		if s.dials.Add(1) > 1 {
			sc.hold = reconnectHold
		}
		return sc, nil
	}
	conn, _, err := zk.Connect(b.servers, timeout,
		zk.WithDialer(dial), zk.WithHostProvider(&hostProvider{}), zk.WithLogger(b.logger), zk.WithLogInfo(false),
		zk.WithEventCallback(s.onEvent), zk.WithMaxBufferSize(16<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: zookeeper: %v", driver.ErrInvalid, err)
	}
	s.conn = conn
	return s, nil
}

// expectCreate returns a channel closed once a create request for path
// (the path as sent: a sequential node's prefix) has been written to the
// connection, or nil if one for path is awaited already. Call unexpect
// when done. A request sent after that write reaches the same server
// after the create, and ZooKeeper serves a session's requests in order.
func (s *session) expectCreate(path string) chan struct{} {
	s.expectMu.Lock()
	defer s.expectMu.Unlock()
	if _, dup := s.expect[path]; dup {
		return nil
	}
	if s.expect == nil {
		s.expect = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	s.expect[path] = ch
	s.expecting.Store(int32(len(s.expect)))
	return ch
}

// unexpect forgets path's entry (if it is still ch).
func (s *session) unexpect(path string, ch chan struct{}) {
	s.expectMu.Lock()
	defer s.expectMu.Unlock()
	if s.expect[path] == ch {
		delete(s.expect, path)
		s.expecting.Store(int32(len(s.expect)))
	}
}

// written is told every request frame go-zookeeper wrote (one frame per
// write: length, xid, opcode, then for a create its path); it closes the
// channel of an awaited create.
func (s *session) written(frame []byte) {
	if s.expecting.Load() == 0 || len(frame) < 16 || int32(binary.BigEndian.Uint32(frame[8:12])) != opCreate {
		return
	}
	n := int(int32(binary.BigEndian.Uint32(frame[12:16])))
	if n < 0 || 16+n > len(frame) {
		return
	}
	s.expectMu.Lock()
	defer s.expectMu.Unlock()
	if ch, ok := s.expect[string(frame[16:16+n])]; ok {
		close(ch)
		delete(s.expect, string(frame[16:16+n]))
		s.expecting.Store(int32(len(s.expect)))
	}
}

// authenticate adds the backend's credentials to the session once (go-zookeeper
// re-sends them after every reconnection).
func (s *session) authenticate(ctx context.Context) error {
	s.authMu.Lock()
	defer s.authMu.Unlock()
	if s.authed {
		return nil
	}
	for _, a := range s.b.auth {
		if _, err := call(s.b, ctx, func() (struct{}, error) { return struct{}{}, s.conn.AddAuth(a.Scheme, []byte(a.Credential)) }); err != nil {
			return s.b.fail(ctx, "add auth "+a.Scheme, err)
		}
	}
	s.authed = true
	return nil
}

// onConnect records the server's answer to a connect request (from the
// sniffing dialer, before go-zookeeper announces the session).
func (s *session) onConnect(r connectResp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.id == 0 {
		return // expired: go-zookeeper reports it and reconnects
	}
	s.id, s.passwd, s.negotiated = r.id, r.passwd, r.timeout
}

// onEvent handles go-zookeeper's session events. It runs on go-zookeeper's
// goroutines and must not block.
func (s *session) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ev.State {
	case zk.StateHasSession:
		// Leases of an earlier session are gone with it.
		for l := range s.leases {
			if l.sid != s.id {
				l.markLost()
			}
		}
		s.readyOnce.Do(func() { close(s.ready) })
	case zk.StateExpired:
		for l := range s.leases {
			l.markLost()
		}
		s.id = 0
	case zk.StateDisconnected:
		// A lease whose TTL is longer than the session timeout could
		// outlive, by its local deadline, a session the server expires
		// during this disconnection: end it now (see the package doc).
		for l := range s.leases {
			if l.overlong() {
				l.markLost()
			}
		}
	default:
		return
	}
	close(s.wake)
	s.wake = make(chan struct{})
}

// state returns the current session ID, its negotiated timeout and a
// channel closed at the next session event.
func (s *session) state() (id int64, negotiated time.Duration, wake <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.negotiated, s.wake
}

// currentID returns the current session ID, waiting while there is none
// (a session expired and the next is not established yet) up to ctx's end
// or the request timeout; 0 if none came.
func (s *session) currentID(ctx context.Context) int64 {
	id, _, wake := s.state()
	if id != 0 {
		return id
	}
	t := time.NewTimer(s.b.timeout)
	defer t.Stop()
	for id == 0 {
		select {
		case <-wake:
		case <-ctx.Done():
			return 0
		case <-t.C:
			return 0
		}
		id, _, wake = s.state()
	}
	return id
}

func (s *session) add(l *lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.sid != s.id {
		return false
	}
	s.leases[l] = struct{}{}
	return true
}

func (s *session) remove(l *lease) {
	s.mu.Lock()
	delete(s.leases, l)
	s.mu.Unlock()
}

// kill closes the session on the server from a second connection with the
// same session ID and password (Curator's KillSession): the server deletes
// its ephemeral nodes at once; go-zookeeper then finds it expired and
// starts a new one.
func (s *session) kill(ctx context.Context) error {
	s.mu.Lock()
	id, passwd, timeout := s.id, s.passwd, s.negotiated
	s.mu.Unlock()
	if id == 0 {
		return nil
	}
	// Attaching our connection to the session makes the server drop the
	// session's own; if go-zookeeper reconnected at once it would take the
	// session back before our closeSession. Keep it off until we are done.
	s.killing.Store(true)
	defer s.killing.Store(false)
	var errs []error
	// A server may drop the second connection (for example while the
	// session's own client is reconnecting at that moment): try a few
	// rounds.
	for round := range 3 {
		for _, addr := range s.b.servers {
			hctx, cancel := context.WithTimeout(ctx, s.b.timeout)
			c, r, err := handshake(hctx, addr, timeout, id, passwd, true)
			if err == nil {
				if r.id != 0 {
					err = closeReply(c)
				}
				c.Close()
			}
			cancel()
			if err == nil {
				return nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
		if err := sleepCtx(ctx, time.Duration(round+1)*100*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: zookeeper: close session %#x: %v", driver.ErrUnavailable, id, errs)
}

// negotiatedLocked is the negotiated timeout; s.mu is held.
func (s *session) negotiatedLocked() time.Duration { return s.negotiated }

// hostProvider hands out the servers in turn, like go-zookeeper's
// DNSHostProvider, but after a lost connection it tries every server once
// at once before go-zookeeper's 1s pause between rounds: with a single
// server the default waits 1s before the first reconnection, which alone
// can outlast a short session.
type hostProvider struct {
	mu      sync.Mutex
	servers []string
	next    int
	tried   int // servers handed out since the last connection
}

func (h *hostProvider) Init(servers []string) error {
	if len(servers) == 0 {
		return fmt.Errorf("%w: zookeeper: no servers", driver.ErrInvalid)
	}
	h.servers = servers
	return nil
}

func (h *hostProvider) Len() int { return len(h.servers) }

func (h *hostProvider) Next() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.servers[h.next]
	h.next = (h.next + 1) % len(h.servers)
	h.tried++
	// The first round is free; each later round starts with a pause (and
	// a check for Close).
	return s, h.tried > len(h.servers) && (h.tried-1)%len(h.servers) == 0
}

func (h *hostProvider) Connected() {
	h.mu.Lock()
	h.tried = 0
	h.mu.Unlock()
}

package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The few raw ZooKeeper protocol exchanges go-zookeeper does not expose:
// the server's answer to a connect request (the negotiated session timeout
// and the session's password) and closing a session from a second
// connection (Curator's KillSession).

// connectResp is the server's answer to a connect request.
type connectResp struct {
	timeout time.Duration // negotiated session timeout
	id      int64         // session ID; 0: the session had expired
	passwd  []byte
}

// parseConnectResp decodes a connect response frame (without its length).
func parseConnectResp(b []byte) (connectResp, error) {
	if len(b) < 20 {
		return connectResp{}, fmt.Errorf("zookeeper: short connect response (%d bytes)", len(b))
	}
	r := connectResp{
		timeout: time.Duration(int32(binary.BigEndian.Uint32(b[4:8]))) * time.Millisecond,
		id:      int64(binary.BigEndian.Uint64(b[8:16])),
	}
	n := int(int32(binary.BigEndian.Uint32(b[16:20])))
	if n < 0 || 20+n > len(b) {
		return connectResp{}, errors.New("zookeeper: bad password length in connect response")
	}
	r.passwd = append([]byte(nil), b[20:20+n]...)
	return r, nil
}

// handshake dials addr and sends a connect request for session id (0 for
// a new one) with passwd and the requested timeout, followed by
// closeSession if andClose; it returns the open connection and the
// server's answer to the connect.
func handshake(ctx context.Context, addr string, timeout time.Duration, id int64, passwd []byte, andClose bool) (net.Conn, connectResp, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, connectResp{}, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	req := connectReq(timeout, id, passwd)
	if andClose {
		// Pipelined: the server reads it right after re-attaching the
		// session, before the session's own client can take it back.
		req = append(req, closeReq()...)
	}
	if _, err := c.Write(req); err != nil {
		c.Close()
		return nil, connectResp{}, err
	}
	frame, err := readFrame(c)
	if err != nil {
		c.Close()
		return nil, connectResp{}, err
	}
	r, err := parseConnectResp(frame)
	if err != nil {
		c.Close()
		return nil, connectResp{}, err
	}
	return c, r, nil
}

func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("zookeeper: frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

func connectReq(timeout time.Duration, id int64, passwd []byte) []byte {
	if len(passwd) == 0 {
		passwd = make([]byte, 16)
	}
	req := make([]byte, 4+4+8+4+8+4+len(passwd))
	binary.BigEndian.PutUint32(req[0:4], uint32(len(req)-4))
	// protocol version 0, last zxid seen 0
	binary.BigEndian.PutUint32(req[16:20], uint32(timeout.Milliseconds()))
	binary.BigEndian.PutUint64(req[20:28], uint64(id))
	binary.BigEndian.PutUint32(req[28:32], uint32(len(passwd)))
	copy(req[32:], passwd)
	return req
}

// opCreate is the create request's opcode.
const opCreate = 1

// closeReq is a closeSession request with xid 1.
func closeReq() []byte {
	req := make([]byte, 12)
	binary.BigEndian.PutUint32(req[0:4], 8)
	binary.BigEndian.PutUint32(req[4:8], 1)           // xid
	binary.BigEndian.PutUint32(req[8:12], 0xfffffff5) // opcode -11: closeSession
	return req
}

// closeReply waits on c for the reply to the closeSession request sent
// with the connect (xid 1): the server has ended the session and deleted
// its ephemeral nodes.
func closeReply(c net.Conn) error {
	for {
		b, err := readFrame(c)
		if err != nil {
			return err
		}
		if len(b) >= 16 && int32(binary.BigEndian.Uint32(b[0:4])) == 1 {
			if code := int32(binary.BigEndian.Uint32(b[12:16])); code != 0 {
				return fmt.Errorf("zookeeper: closeSession failed with code %d", code)
			}
			return nil
		}
		// a watch event or ping reply: skip
	}
}

// probeMinTimeout asks the first server that answers for the session
// timeout it grants to a client that requests 1ms: its
// minSessionTimeout. The probe session is closed at once.
func probeMinTimeout(ctx context.Context, servers []string) (time.Duration, error) {
	var errs []error
	for _, addr := range servers {
		c, r, err := handshake(ctx, addr, time.Millisecond, 0, nil, true)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		if r.id != 0 {
			_ = closeReply(c)
		}
		c.Close()
		if r.timeout <= 0 {
			errs = append(errs, fmt.Errorf("%s: no session granted", addr))
			continue
		}
		return r.timeout, nil
	}
	return 0, errors.Join(errs...)
}

// sniffConn wraps a go-zookeeper connection and decodes the first frame
// the server sends on it: the connect response.
//
// On a reconnection (hold > 0) it also holds back the client's writes for
// hold after the connect response: go-zookeeper v1.0.4 reads its last seen
// zxid (to re-register watches) concurrently with its receive loop writing
// it on a reply (a data race, go-zookeeper/zk#35, samuel/go-zookeeper#260);
// with no request sent yet, no reply can arrive in that window.
type sniffConn struct {
	net.Conn
	onConnect func(connectResp)
	onWrite   func(frame []byte) // each frame written after the connect request, once written
	hold      time.Duration

	mu      sync.Mutex
	buf     []byte
	done    bool
	readyAt time.Time
	wrote   atomic.Bool // the connect request went out
}

func (c *sniffConn) Write(p []byte) (int, error) {
	if c.hold > 0 {
		c.mu.Lock()
		at := c.readyAt
		c.mu.Unlock()
		if !at.IsZero() {
			if d := c.hold - time.Since(at); d > 0 {
				time.Sleep(d)
			}
		}
	}
	n, err := c.Conn.Write(p)
	if err == nil && c.onWrite != nil && c.wrote.Swap(true) { // the first write is the connect request
		c.onWrite(p)
	}
	return n, err
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if !c.done {
			c.buf = append(c.buf, p[:n]...)
			if len(c.buf) >= 4 {
				if size := int(binary.BigEndian.Uint32(c.buf[:4])); len(c.buf) >= 4+size {
					c.done = true
					c.readyAt = time.Now()
					if r, perr := parseConnectResp(c.buf[4 : 4+size]); perr == nil {
						c.onConnect(r)
					}
					c.buf = nil
				}
			}
		}
		c.mu.Unlock()
	}
	return n, err
}

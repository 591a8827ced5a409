package etcd

import (
	"context"
	"errors"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

// The keepalive stream. clientv3's KeepAliveOnce opens a LeaseKeepAlive
// stream per call (a new HTTP/2 stream, its headers, a goroutine); a
// TryAcquire that sends one alongside its Txn paid for that every time.
// Instead the backend keeps one LeaseKeepAlive stream open and sends each
// keepalive as one message on it. etcd answers the requests of a stream
// one at a time, in order, so the answers are matched to the requests
// first in, first out. A stream that fails, or does not answer within the
// request timeout, is dropped with every request pending on it; the next
// keepalive opens a new one.

// kaStream is the shared stream; guarded by its mu.
type kaStream struct {
	mu  sync.Mutex
	cur *kaConn
}

// kaConn is one LeaseKeepAlive stream and the requests it has not yet
// answered, oldest first.
type kaConn struct {
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	pending []*kaCall
}

// kaCall is one keepalive request on the stream.
type kaCall struct {
	done chan struct{}
	ttl  int64
	err  error
}

// errKAStreamProtocol: the stream answered a request it was not sent.
var errKAStreamProtocol = errors.New("etcd: keepalive stream answered an unknown request")

// kaSent is a keepalive sent on the shared stream, not yet answered.
type kaSent struct {
	kc   *kaConn // nil if the stream could not be opened
	call *kaCall
}

// kaSend sends a keepalive of lease id on the shared stream without
// waiting for its answer: kaWait waits for it. The caller may send other
// requests in between, which then overlap with the keepalive.
func (b *backend) kaSend(id clientv3.LeaseID) kaSent {
	s := &b.ka
	call := &kaCall{done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	kc := s.cur
	if kc == nil {
		var err error
		if kc, err = b.openKA(); err != nil {
			call.err = err
			close(call.done)
			return kaSent{call: call}
		}
		s.cur = kc
	}
	kc.pending = append(kc.pending, call)
	if err := kc.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
		s.dropLocked(kc, err)
	}
	return kaSent{kc: kc, call: call}
}

// kaWait waits for the answer to k: the TTL granted, or an error
// (rpctypes.ErrLeaseNotFound if the lease is gone). When ctx ends first
// the stream is dropped (it may be stuck).
func (b *backend) kaWait(ctx context.Context, k kaSent) (int64, error) {
	s, call := &b.ka, k.call
	select {
	case <-call.done:
	case <-ctx.Done():
		if k.kc != nil {
			s.mu.Lock()
			s.dropLocked(k.kc, ctx.Err())
			s.mu.Unlock()
		}
		<-call.done
	}
	if call.err != nil {
		return 0, call.err
	}
	if call.ttl <= 0 {
		return 0, rpctypes.ErrLeaseNotFound
	}
	return call.ttl, nil
}

// openKA opens a stream and starts its receiver. s.mu is held.
func (b *backend) openKA() (*kaConn, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, driver.ErrClosed
	}
	b.ops.Add(1)
	b.mu.Unlock()
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(b.ctx))
	st, err := pb.NewLeaseClient(b.cli.ActiveConnection()).LeaseKeepAlive(sctx)
	if err != nil {
		cancel()
		b.ops.Done()
		return nil, err
	}
	kc := &kaConn{stream: st, cancel: cancel}
	go func() {
		defer b.ops.Done()
		b.recvKA(kc)
	}()
	return kc, nil
}

// recvKA hands each answer of kc to its request until kc fails.
func (b *backend) recvKA(kc *kaConn) {
	s := &b.ka
	for {
		resp, err := kc.stream.Recv()
		s.mu.Lock()
		if err == nil && len(kc.pending) == 0 {
			err = errKAStreamProtocol
		}
		if err != nil {
			s.dropLocked(kc, err)
			s.mu.Unlock()
			return
		}
		call := kc.pending[0]
		kc.pending[0] = nil
		kc.pending = kc.pending[1:]
		s.mu.Unlock()
		call.ttl = resp.TTL
		close(call.done)
	}
}

// dropLocked ends kc (if it is not ended yet): every request pending on
// it fails with err, and the next keepalive opens a new stream. s.mu is
// held.
func (s *kaStream) dropLocked(kc *kaConn, err error) {
	if kc.cancel == nil {
		return // dropped already
	}
	kc.cancel()
	kc.cancel = nil
	if s.cur == kc {
		s.cur = nil
	}
	for _, call := range kc.pending {
		call.err = err
		close(call.done)
	}
	kc.pending = nil
}

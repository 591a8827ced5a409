package etcd

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testhelp"
)

// watchGate holds back the answers of an etcd client's watch streams
// while closed, as a slow network or a starved client would: the server
// and every other request are real and unaffected.
type watchGate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newWatchGate() *watchGate {
	g := &watchGate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *watchGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *watchGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *watchGate) wait(ctx context.Context) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	case <-ctx.Done():
	}
}

type gatedStream struct {
	grpc.ClientStream
	g *watchGate
}

// RecvMsg holds back a message received while the gate is closed,
// including one that was awaited when it closed.
func (s gatedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.g.wait(s.Context())
	return err
}

// laggingWatchClient returns a Client (KeyPrefix kp) whose shared watch's
// answers g holds back, and its backend.
func laggingWatchClient(t *testing.T, kp string) (*fencelock.Client, *backend, *watchGate) {
	g := newWatchGate()
	t.Cleanup(g.release) // before the client closes
	srv := sharedEtcd(t, 1)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				s, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil || method != "/etcdserverpb.Watch/Watch" {
					return s, err
				}
				return gatedStream{s, g}, nil
			})}})
	if err != nil {
		t.Fatal(err)
	}
	c := mustNew(t, cli, &Config{KeyPrefix: kp}, nil)
	t.Cleanup(func() {
		g.release()
		_ = c.Close()
		_ = cli.Close()
	})
	return c, backendOf(t, c), g
}

// waitWatchLive waits until b's shared watch is up (polling a state, not
// a sync: the watch has no signal for it).
func waitWatchLive(t *testing.T, b *backend) {
	t.Helper()
	b.mu.Lock()
	b.startNowLocked()
	b.mu.Unlock()
	testhelp.Eventually(t, 10*time.Second, func() error {
		if !b.watchLive() {
			return errors.New("watch not established")
		}
		return nil
	})
}

// TestExtendDoesNotTrustLaggingWatch: the shared watch is up but its
// answers are held back when the store drops our key and grants the lock
// to another client. Extend must not report success: the keepalive
// proves only that the class lease lives, and the watch's silence proves
// nothing; the read sent with the keepalive finds the key gone.
func TestExtendDoesNotTrustLaggingWatch(t *testing.T) {
	e := newInteropEnv(t)
	c, b, gate := laggingWatchClient(t, e.keyPrefix)
	o := &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)}
	l, err := c.TryAcquire(e.ctx, "x", o)
	if err != nil {
		t.Fatal(err)
	}
	waitWatchLive(t, b)
	gate.hold()
	other := e.client()
	adm := backendOf(t, other)
	if err := adm.Expire(e.ctx, "x"); err != nil {
		t.Fatal(err)
	}
	l2, err := other.TryAcquire(e.ctx, "x", o)
	if err != nil {
		t.Fatalf("TryAcquire after the store dropped the lock: %v", err)
	}
	defer l2.Release(e.ctx)
	vu := l.ValidUntil()
	if err := l.Extend(e.ctx, 0); !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Extend of a lease whose key the store gave to another client, its watch lagging: got %v, want ErrLeaseLost", err)
	}
	if l.ValidUntil().After(vu) {
		t.Fatalf("ValidUntil moved forward by %v on an Extend that found the key gone", l.ValidUntil().Sub(vu))
	}
	if err := l2.Extend(e.ctx, 0); err != nil {
		t.Fatalf("the new holder's Extend: %v", err)
	}
}

// TestAutoRenewDoesNotTrustLaggingWatch: the same with auto-renew: a
// renewal after the drop ends the lease (before the ValidUntil it had at
// the drop), and never moves ValidUntil forward.
func TestAutoRenewDoesNotTrustLaggingWatch(t *testing.T) {
	e := newInteropEnv(t)
	c, b, gate := laggingWatchClient(t, e.keyPrefix)
	const ttl = 3 * time.Second
	l, err := c.TryAcquire(e.ctx, "x", &fencelock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	waitWatchLive(t, b)
	gate.hold()
	if _, err := e.raw.Delete(e.ctx, string(e.lockKey("x").Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	vu, dropped := l.ValidUntil(), time.Now()
	select {
	case <-l.Done():
		t.Logf("lease ended %v after the drop: %v", time.Since(dropped).Round(time.Millisecond), l.Err())
	case <-time.After(time.Until(vu)):
		t.Fatalf("lease not ended by its renewals before its ValidUntil at the drop; ValidUntil now %v later", l.ValidUntil().Sub(vu))
	}
	if !errors.Is(l.Err(), fencelock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
	if l.ValidUntil().After(vu) {
		t.Fatalf("ValidUntil moved forward by %v after the key was deleted", l.ValidUntil().Sub(vu))
	}
}

// TestExtendPutsMovedKeyBack: our key, still ours, is on another etcd
// lease (what a move to another TTL whose outcome was unknown leaves
// behind). A keepalive of the class lease does not renew it, so Extend
// puts it back on the class lease (keeping its CreateRevision) rather
// than count the renewal or report a loss.
func TestExtendPutsMovedKeyBack(t *testing.T) {
	e := newInteropEnv(t)
	c := e.client()
	l, err := c.TryAcquire(e.ctx, "x", &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	var cls clientv3.LeaseID
	if !l.As(&cls) {
		t.Fatal("Lease.As(*clientv3.LeaseID) = false")
	}
	kv := e.lockKey("x").Kvs[0]
	other, err := e.raw.Grant(e.ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	defer e.raw.Revoke(context.Background(), other.ID)
	if _, err := e.raw.Put(e.ctx, string(kv.Key), "", clientv3.WithLease(other.ID)); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(e.ctx, 0); err != nil {
		t.Fatalf("Extend of a key of ours on another etcd lease: %v", err)
	}
	now := e.lockKey("x").Kvs[0]
	if now.CreateRevision != kv.CreateRevision || clientv3.LeaseID(now.Lease) != cls {
		t.Fatalf("after Extend: key on lease %x with CreateRevision %d, want the class lease %x and %d", now.Lease, now.CreateRevision, cls, kv.CreateRevision)
	}
	if err := l.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
}

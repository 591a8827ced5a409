package peers

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// etcdMutexImpl is go.etcd.io/etcd/client/v3/concurrency.Mutex: one
// client and one Session per Lock (a Mutex per acquisition on it).
func etcdMutexImpl(endpoint string) Impl {
	return Impl{
		ID: "etcd/mutex", Store: "etcd", Library: "go.etcd.io/etcd/client/v3",
		Notes: "concurrency.Mutex on one shared Session per client (default TTL 60s)",
		Open: func(ctx context.Context) (Lock, error) {
			c, err := newEtcdClient(endpoint)
			if err != nil {
				return nil, err
			}
			s, err := concurrency.NewSession(c, concurrency.WithContext(context.WithoutCancel(ctx)))
			if err != nil {
				_ = c.Close()
				return nil, err
			}
			return etcdMutexLock{c, s}, nil
		},
	}
}

func newEtcdClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
	})
}

type etcdMutexLock struct {
	c *clientv3.Client
	s *concurrency.Session
}

func (e etcdMutexLock) Try(ctx context.Context, key string) (Unlock, bool, error) {
	m := concurrency.NewMutex(e.s, "/peers-mutex/"+key)
	err := m.TryLock(ctx)
	if errors.Is(err, concurrency.ErrLocked) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return m.Unlock, true, nil
}

func (e etcdMutexLock) Wait(ctx context.Context, key string) (Unlock, error) {
	m := concurrency.NewMutex(e.s, "/peers-mutex/"+key)
	if err := m.Lock(ctx); err != nil {
		return nil, ctxErr(ctx, err)
	}
	return m.Unlock, nil
}

func (e etcdMutexLock) Close() error {
	err := e.s.Close()
	return errors.Join(err, e.c.Close())
}

// etcdPutFloor is one etcd Put (one raft commit, fsynced).
func etcdPutFloor(endpoint string) Floor {
	return Floor{
		ID: "etcd/put", Store: "etcd", What: "clientv3 Put (one raft commit, fsync)",
		Open: func(ctx context.Context) (func(context.Context) error, func(), error) {
			c, err := newEtcdClient(endpoint)
			if err != nil {
				return nil, nil, err
			}
			op := func(ctx context.Context) error { _, err := c.Put(ctx, "/peers-floor", "x"); return err }
			return op, func() { _ = c.Close() }, nil
		},
	}
}

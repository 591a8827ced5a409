package peers

import (
	"context"
	"time"

	"github.com/go-zookeeper/zk"
)

// zkLockImpl is github.com/go-zookeeper/zk's Lock recipe (sequential
// ephemeral node, watch on the predecessor), one session per client.
func zkLockImpl(servers []string) Impl {
	return Impl{
		ID: "zookeeper/zk.Lock", Store: "zookeeper", Library: "github.com/go-zookeeper/zk",
		Notes: "zk.NewLock per acquisition on one session (10s); no try and no context: the uncontended measure uses Lock(), and a Wait whose ctx ends returns after the lock is granted (then released)",
		Open: func(ctx context.Context) (Lock, error) {
			c, err := zkConnect(ctx, servers)
			if err != nil {
				return nil, err
			}
			return zkLock{c}, nil
		},
	}
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// zkConnect opens a session and waits until it serves (one Exists).
func zkConnect(ctx context.Context, servers []string) (*zk.Conn, error) {
	c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(quietLogger{}))
	if err != nil {
		return nil, err
	}
	if _, _, err := c.Exists("/"); err != nil {
		c.Close()
		return nil, err
	}
	return c, ctx.Err()
}

type zkLock struct{ c *zk.Conn }

func (z zkLock) Try(context.Context, string) (Unlock, bool, error) { return nil, false, ErrNoTry }

func (z zkLock) Wait(ctx context.Context, key string) (Unlock, error) {
	l := zk.NewLock(z.c, "/peers-zk/"+key, zk.WorldACL(zk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		_ = l.Unlock()
		return nil, context.Cause(ctx)
	}
	return func(context.Context) error { return l.Unlock() }, nil
}

func (z zkLock) Close() error { z.c.Close(); return nil }

// zkExistsFloor is one Exists (a read round trip; ZooKeeper writes also
// go through the log, but a lock needs at least this).
func zkExistsFloor(servers []string) Floor {
	return Floor{
		ID: "zookeeper/exists", Store: "zookeeper", What: "go-zookeeper Exists(\"/\") (one read round trip)",
		Open: func(ctx context.Context) (func(context.Context) error, func(), error) {
			c, err := zkConnect(ctx, servers)
			if err != nil {
				return nil, nil, err
			}
			op := func(context.Context) error { _, _, err := c.Exists("/"); return err }
			return op, c.Close, nil
		},
	}
}

package peers

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
)

// RedislockBackoff is the retry strategy redislock, which has no blocking
// wait, is given for Wait: linear, this often.
const RedislockBackoff = 5 * time.Millisecond

// redislockImpl is github.com/bsm/redislock on one go-redis client with
// defaults.
func redislockImpl(addr string) Impl {
	return Impl{
		ID: "redis/redislock", Store: "redis", Library: "github.com/bsm/redislock",
		Notes: "go-redis v9 defaults; Try: NoRetry; Wait: LinearBackoff(5ms) until ctx ends (no blocking wait)",
		Open: func(ctx context.Context) (Lock, error) {
			c := goredis.NewClient(&goredis.Options{Addr: addr})
			if err := c.Ping(ctx).Err(); err != nil {
				_ = c.Close()
				return nil, err
			}
			return redislockLock{c, redislock.New(c)}, nil
		},
	}
}

type redislockLock struct {
	rc *goredis.Client
	c  *redislock.Client
}

func (r redislockLock) Try(ctx context.Context, key string) (Unlock, bool, error) {
	l, err := r.c.Obtain(ctx, key, TTL, &redislock.Options{RetryStrategy: redislock.NoRetry()})
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return l.Release, true, nil
}

func (r redislockLock) Wait(ctx context.Context, key string) (Unlock, error) {
	for {
		l, err := r.c.Obtain(ctx, key, TTL, &redislock.Options{RetryStrategy: redislock.LinearBackoff(RedislockBackoff)})
		if err == nil {
			return l.Release, nil
		}
		// Obtain gives up at ctx's deadline (or after TTL without one).
		if ctx.Err() != nil || !errors.Is(err, redislock.ErrNotObtained) {
			return nil, ctxErr(ctx, err)
		}
	}
}

func (r redislockLock) Close() error { return r.rc.Close() }

// redsyncImpl is github.com/go-redsync/redsync/v4 over one go-redis client
// per address (one address: single node; five: Redlock).
func redsyncImpl(id, store string, addrs []string) Impl {
	return Impl{
		ID: id, Store: store, Library: "github.com/go-redsync/redsync/v4",
		Notes: "go-redis v9 pools, defaults (retry delay 50–250 ms random); Try: WithTries(1); Wait: LockContext repeated until ctx ends",
		Open: func(ctx context.Context) (Lock, error) {
			var cs []*goredis.Client
			var pools []rsredis.Pool
			for _, a := range addrs {
				c := goredis.NewClient(&goredis.Options{Addr: a})
				cs = append(cs, c)
				pools = append(pools, rsgoredis.NewPool(c))
			}
			l := redsyncLock{cs, redsync.New(pools...)}
			for _, c := range cs {
				if err := c.Ping(ctx).Err(); err != nil {
					_ = l.Close()
					return nil, err
				}
			}
			return l, nil
		},
	}
}

type redsyncLock struct {
	cs []*goredis.Client
	rs *redsync.Redsync
}

func (r redsyncLock) unlock(m *redsync.Mutex) Unlock {
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock refused")
		}
		return err
	}
}

// taken reports whether err says only that the lock is held elsewhere.
func taken(err error) bool {
	var re redsync.RedisError
	var pre *redsync.RedisError
	return !errors.As(err, &re) && !errors.As(err, &pre)
}

func (r redsyncLock) Try(ctx context.Context, key string) (Unlock, bool, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(TTL), redsync.WithTries(1))
	err := m.TryLockContext(ctx)
	if err != nil && taken(err) && ctx.Err() == nil {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, ctxErr(ctx, err)
	}
	return r.unlock(m), true, nil
}

func (r redsyncLock) Wait(ctx context.Context, key string) (Unlock, error) {
	for {
		m := r.rs.NewMutex(key, redsync.WithExpiry(TTL))
		err := m.LockContext(ctx)
		if err == nil {
			return r.unlock(m), nil
		}
		if ctx.Err() != nil || !taken(err) {
			return nil, ctxErr(ctx, err)
		}
	}
}

func (r redsyncLock) Close() error {
	var errs []error
	for _, c := range r.cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// pingFloor is one go-redis PING.
func pingFloor(addr string) Floor {
	return Floor{
		ID: "redis/ping", Store: "redis", What: "go-redis PING (one round trip)",
		Open: func(ctx context.Context) (func(context.Context) error, func(), error) {
			c := goredis.NewClient(&goredis.Options{Addr: addr})
			return func(ctx context.Context) error { return c.Ping(ctx).Err() }, func() { _ = c.Close() }, nil
		},
	}
}

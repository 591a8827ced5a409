package peers

import (
	"context"
	"errors"

	"github.com/fencelock/fencelock"
	_ "github.com/fencelock/fencelock/backends/dynamodb"
	_ "github.com/fencelock/fencelock/backends/etcd"
	_ "github.com/fencelock/fencelock/backends/pgadvisory"
	_ "github.com/fencelock/fencelock/backends/redis"
	_ "github.com/fencelock/fencelock/backends/redlock"
	_ "github.com/fencelock/fencelock/backends/zookeeper"
)

// fencelockNotes says how every fencelock implementation runs.
const fencelockNotes = "opened by URL with defaults; fenced; AutoRenew off (the peers have none)"

// fencelockAcquire: the TTL every implementation gets; auto-renew off, as
// the peers have none.
var fencelockAcquire = &fencelock.AcquireOptions{TTL: TTL, AutoRenew: fencelock.Bool(false)}

// fencelockImpl is fencelock opened by url.
func fencelockImpl(id, store, url, notes string) Impl {
	return Impl{
		ID: id, Store: store, Library: "github.com/fencelock/fencelock", Notes: notes,
		Open: func(ctx context.Context) (Lock, error) {
			c, err := fencelock.Open(ctx, url)
			if err != nil {
				return nil, err
			}
			return fencelockLock{c}, nil
		},
	}
}

type fencelockLock struct{ c *fencelock.Client }

func (f fencelockLock) Try(ctx context.Context, key string) (Unlock, bool, error) {
	l, err := f.c.TryAcquire(ctx, key, fencelockAcquire)
	if errors.Is(err, fencelock.ErrNotAcquired) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return l.Release, true, nil
}

func (f fencelockLock) Wait(ctx context.Context, key string) (Unlock, error) {
	l, err := f.c.Acquire(ctx, key, fencelockAcquire)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (f fencelockLock) Close() error { return f.c.Close() }

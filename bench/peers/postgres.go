package peers

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgRawImpl is raw pgx: pg_advisory_xact_lock in a transaction (begin;
// lock; commit releases), no fence.
func pgRawImpl(dsn string) Impl {
	return Impl{
		ID: "postgres/pgx-xact", Store: "postgres", Library: "github.com/jackc/pgx/v5",
		Notes: "pgxpool; begin; pg_try_advisory_xact_lock / pg_advisory_xact_lock; commit releases; unfenced",
		Open: func(ctx context.Context) (Lock, error) {
			p, err := pgxpool.New(ctx, dsn)
			if err != nil {
				return nil, err
			}
			if err := p.Ping(ctx); err != nil {
				p.Close()
				return nil, err
			}
			return pgRawLock{p}, nil
		},
	}
}

type pgRawLock struct{ p *pgxpool.Pool }

func (r pgRawLock) lock(ctx context.Context, key string, try bool) (Unlock, bool, error) {
	tx, err := r.p.Begin(ctx)
	if err != nil {
		return nil, false, err
	}
	ok := true
	if try {
		err = tx.QueryRow(ctx, "select pg_try_advisory_xact_lock($1)", key64(key)).Scan(&ok)
	} else {
		_, err = tx.Exec(ctx, "select pg_advisory_xact_lock($1)", key64(key))
	}
	if err != nil || !ok {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, false, ctxErr(ctx, err)
	}
	return func(ctx context.Context) error { return tx.Commit(ctx) }, true, nil
}

func (r pgRawLock) Try(ctx context.Context, key string) (Unlock, bool, error) {
	return r.lock(ctx, key, true)
}

func (r pgRawLock) Wait(ctx context.Context, key string) (Unlock, error) {
	u, _, err := r.lock(ctx, key, false)
	return u, err
}

func (r pgRawLock) Close() error { r.p.Close(); return nil }

// pgCommitFloor is one flushed commit: an INSERT in autocommit with
// synchronous_commit on (the server's default) on a server with fsync on.
func pgCommitFloor(dsn string) Floor {
	return Floor{
		ID: "postgres/commit", Store: "postgres", What: "INSERT, autocommit, synchronous_commit on (one WAL flush)",
		Open: func(ctx context.Context) (func(context.Context) error, func(), error) {
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return nil, nil, err
			}
			if _, err := c.Exec(ctx, "create table if not exists peers_floor (v int)"); err != nil {
				_ = c.Close(ctx)
				return nil, nil, err
			}
			op := func(ctx context.Context) error {
				_, err := c.Exec(ctx, "insert into peers_floor values (1)")
				return err
			}
			return op, func() { _ = c.Close(context.Background()) }, nil
		},
	}
}

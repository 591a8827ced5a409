package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/guard"
)

// --resource postgres: guarded counters in real tables (guard.PGCounter),
// in the database named by FENCELOCK_RESOURCE_URL, else by --url when it is
// a postgres:// URL. Each run gets its own table, dropped at the end.
func init() {
	resources["postgres"] = func(ctx context.Context, storeURL string) (func(ctx context.Context, id string) (guard.Resource, error), func(), error) {
		dsn := os.Getenv("FENCELOCK_RESOURCE_URL")
		if dsn == "" && (strings.HasPrefix(storeURL, "postgres://") || strings.HasPrefix(storeURL, "postgresql://")) {
			dsn = storeURL
		}
		if dsn == "" {
			return nil, nil, fmt.Errorf("--resource postgres needs a database: set FENCELOCK_RESOURCE_URL or use a postgres:// --url")
		}
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		prefix := fmt.Sprintf("fencelock_lostupdates_%d_", time.Now().UnixNano())
		var tables []string
		newRes := func(ctx context.Context, id string) (guard.Resource, error) {
			table := prefix + id // quoted by guard: any id is safe
			tables = append(tables, table)
			return guard.CreatePGCounter(ctx, pool, table, 1)
		}
		closeRes := func() {
			for _, t := range tables {
				_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{t}.Sanitize())
			}
			pool.Close()
		}
		return newRes, closeRes, nil
	}
}

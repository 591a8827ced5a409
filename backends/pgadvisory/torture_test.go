package pgadvisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/guard"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTortureByURL: the short CI torture by URL, with the guarded
// registers in a PostgreSQL table (guard.PGCounter) on the same server.
func TestTortureByURL(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	pool, err := pgxpool.New(t.Context(), pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS fencelock_torture"); err != nil {
		t.Fatal(err)
	}
	if _, err := guard.CreatePGCounter(ctx, pool, "fencelock_torture", 0); err != nil {
		t.Fatal(err)
	}
	var mu = make(chan struct{}, 1)
	next := int64(0)
	reg := func(ctx context.Context, _ string) (guard.Resource, error) {
		mu <- struct{}{}
		next++
		id := next
		<-mu
		return guard.CreatePGCounter(ctx, pool, "fencelock_torture", id)
	}
	conformance.CITorture(t, conformance.URLHarness(pg.URL()), conformance.TortureOptions{Register: reg})
}

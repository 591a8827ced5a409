package pgadvisory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/guard"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTortureByURL: the short CI torture by URL, with the guarded
// registers in a PostgreSQL table (guard.PGCounter) on the same server.
// The test owns that server, so the nemesis also pauses it (SIGSTOP of the
// postmaster and every backend) and kills it (SIGKILL: a crash, recovery
// at the restart), which ends every session and so every lock.
func TestTortureByURL(t *testing.T) {
	pg := testserver.StartPostgres(t)
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
	o := conformance.TortureOptions{Register: reg}
	if pg.Proc != nil {
		o.RestartLosesLocks = true
		o.Pause, o.Resume = pg.Pause, pg.Resume
		o.Restart = func(ctx context.Context) error {
			if err := pg.Kill(); err != nil {
				return fmt.Errorf("kill postgres: %w", err)
			}
			return pg.Start(ctx)
		}
	}
	conformance.CITorture(t, conformance.URLHarness(pg.URL()), o)
}

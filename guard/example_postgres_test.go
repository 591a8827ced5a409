package guard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
	"github.com/fencelock/fencelock/internal/testserver"
)

// Guard rows of any table with a fence column: claim the row with the
// lease's fence before reading it, and write only while the claim holds. A
// stale holder's claim or write fails with ErrStale instead of silently
// overwriting a newer holder's work.
func ExamplePGTable() {
	ctx := context.Background()
	dsn, err := testserver.SharedPostgresURL() // your database, e.g. "postgres://app@db:5432/app"
	if err != nil {
		panic(err)
	}
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `DROP TABLE IF EXISTS example_jobs;
		CREATE TABLE example_jobs (job text PRIMARY KEY, state text);
		INSERT INTO example_jobs VALUES ('nightly-report', 'new')`); err != nil {
		panic(err)
	}
	jobs, err := guard.NewPGTable("example_jobs", "job", "fence")
	if err != nil {
		panic(err)
	}
	if err := jobs.EnsureFenceColumn(ctx, db); err != nil { // fence bigint NOT NULL DEFAULT 0
		panic(err)
	}

	locks, err := fencelock.Open(ctx, dsn) // any backend works; here PostgreSQL too
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	l, err := locks.Acquire(ctx, "job/nightly-report", nil)
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	f := l.Fence()

	var state string
	if err := jobs.Claim(ctx, db, "nightly-report", f, []string{"state"}, &state); err != nil {
		panic(err) // errors.Is(err, guard.ErrStale): a newer holder took over; stop
	}
	err = jobs.WriteClaimed(ctx, db, "nightly-report", f, []string{"state"}, "done")
	fmt.Println("was", state, "- write:", err)

	// A holder with an older fence is refused.
	err = jobs.WriteClaimed(ctx, db, "nightly-report", f-1, []string{"state"}, "clobbered")
	fmt.Println("stale write refused:", errors.Is(err, guard.ErrStale))
	// Output:
	// was new - write: <nil>
	// stale write refused: true
}

package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
	"github.com/fencelock/fencelock/internal/testserver"
)

// exampleDSN is the database the examples run against (a server the tests
// start); in your code, your own, e.g. "postgres://app@db:5432/app".
func exampleDSN() string {
	u, err := testserver.SharedPostgresURL()
	if err != nil {
		panic(err)
	}
	return u
}

// Take a lock in PostgreSQL through a pgx pool, and carry its fence to the
// protected resource.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDSN())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	locks, err := pgadvisory.New(pool, nil, nil) // or fencelock.Open(ctx, "postgres://...")
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	l, err := locks.Acquire(ctx, "nightly-report", &fencelock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	// Another worker (any language) that takes
	// pg_try_advisory_xact_lock(<Key("nightly-report")>) is refused now.
	var free bool
	_ = pool.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", pgadvisory.Key("nightly-report")).Scan(&free)
	fmt.Println("lock key", pgadvisory.Key("nightly-report"), "free to others:", free)
	fmt.Println("fence is a positive bigint:", l.Fence().Int64() > 0)
	// Output:
	// lock key -9216380091565040003 free to others: false
	// fence is a positive bigint: true
}

// Transaction-scoped mode: do the writes in the lease's own transaction,
// so they commit with the COMMIT that frees the lock — or not at all, if
// the lease was lost.
func ExampleTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDSN())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS example_accounts;
		CREATE TABLE example_accounts (id int PRIMARY KEY, balance int);
		INSERT INTO example_accounts VALUES (1, 100)`); err != nil {
		panic(err)
	}
	locks, err := pgadvisory.New(pool, nil, nil)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	l, err := locks.Acquire(ctx, "account/1", nil)
	if err != nil {
		panic(err)
	}
	tx, _ := pgadvisory.Tx(l)
	if _, err := tx.Exec(ctx, "UPDATE example_accounts SET balance = balance + 10 WHERE id = 1"); err != nil {
		panic(err)
	}
	fmt.Println("Commit is the lease's:", errors.Is(tx.Commit(ctx), pgadvisory.ErrTxOwned))
	if err := l.Release(ctx); err != nil { // COMMIT: the write and the unlock together
		panic(err)
	}
	var balance int
	_ = pool.QueryRow(ctx, "SELECT balance FROM example_accounts WHERE id = 1").Scan(&balance)
	fmt.Println("balance", balance)
	// Output:
	// Commit is the lease's: true
	// balance 110
}

// Key is the advisory lock key of a lock name; Python computes the same
// number with int.from_bytes(hashlib.blake2b(name.encode(),
// digest_size=8).digest(), "big", signed=True).
func ExampleKey() {
	fmt.Println(pgadvisory.Key("nightly-report"))
	// Output: -9216380091565040003
}

// Lease.As gives the lease's own transaction as a pgx.Tx (the one Tx
// returns).
func Example_leaseAs() {
	ctx := context.Background()
	locks, err := fencelock.Open(ctx, exampleDSN())
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	l, err := locks.TryAcquire(ctx, "example-as", &fencelock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	var tx pgx.Tx
	fmt.Println("native transaction:", l.As(&tx))
	// Output:
	// native transaction: true
}

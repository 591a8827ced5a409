package pgadvisory

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestQueryText: the simple-protocol text of a query has each $n replaced
// by its argument as a literal.
func TestQueryText(t *testing.T) {
	q := newQuery("BEGIN", nil, "SELECT $1::text, $2::bigint, $1::text", []int{1, 0})
	got := q.text([][]byte{[]byte("-42"), []byte("it's")})
	want := "BEGIN; SELECT E'it''s'::text, '-42'::bigint, E'it''s'::text"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestGrantProtocol: with the pool's default exec mode a grant prepares
// its statements once on the connection (they are in pg_prepared_statements
// after it), and with simple_protocol it prepares none; both grant.
func TestGrantProtocol(t *testing.T) {
	ctx := context.Background()
	url := testserver.SharedPostgres(t).URL()
	for _, tc := range []struct {
		params   string
		prepared bool
	}{
		{"", true},
		{"&default_query_exec_mode=simple_protocol", false},
	} {
		for _, strict := range []bool{false, true} {
			pool, err := pgxpool.New(ctx, url+tc.params+"&pool_max_conns=1")
			if err != nil {
				t.Fatal(err)
			}
			b := newBackend(pool, true, &Config{NoFenceFlush: !strict})
			req := driver.AcquireRequest{Name: "grant-protocol-" + t.Name(), TTL: 10 * time.Second}
			for range 2 {
				l, err := b.TryAcquire(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				l2, _, err := b.Acquire(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if l2.Fence() <= l.Fence() {
					t.Fatalf("fence %d after %d", l2.Fence(), l.Fence())
				}
				if err := l2.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var n int
			err = pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
				return c.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'fencelock\\_%'", pgx.QueryExecModeSimpleProtocol).Scan(&n)
			})
			if err != nil {
				t.Fatal(err)
			}
			// BEGIN (shared), try, wait (2) and the folded wait of the
			// connection's second Acquire (1): 5; strict, BEGIN, COMMIT,
			// try (2), wait (3): 7.
			want := map[bool]int{false: 5, true: 7}[strict]
			if !tc.prepared {
				want = 0
			}
			if n != want {
				t.Errorf("params %q strict %v: %d prepared statements, want %d", tc.params, strict, n, want)
			}
			_ = b.Close()
		}
	}
}

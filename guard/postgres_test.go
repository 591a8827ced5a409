package guard_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	_ "github.com/fencelock/fencelock/backends/pgadvisory" // postgres:// lockers
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/guard"
	"github.com/fencelock/fencelock/internal/testserver"
)

func TestMain(m *testing.M) { testserver.Main(m) }

func pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(t.Context(), testserver.SharedPostgres(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func uniqueTable(t *testing.T, db *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("guard_%s_%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_")), time.Now().UnixNano())
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()) })
	return name
}

// TestPGCounterOverlap is the seed story on a real table: A (fence 33)
// reads and stalls; B (fence 34) reads and works; A writes; B writes.
// Write-only accepts both writes and loses an increment; claim-first
// rejects A's write, and nothing is lost.
func TestPGCounterOverlap(t *testing.T) {
	ctx := t.Context()
	db := pool(t)
	const a, b = 33, 34

	wo, err := guard.CreatePGCounter(ctx, db, uniqueTable(t, db), 1)
	if err != nil {
		t.Fatal(err)
	}
	va, _ := wo.Read(ctx)
	vb, _ := wo.Read(ctx)
	errA := wo.WriteIfNotOlder(ctx, a, va+1)
	errB := wo.WriteIfNotOlder(ctx, b, vb+1)
	final, _ := wo.Read(ctx)
	if errA != nil || errB != nil || final != 1 {
		t.Fatalf("write-only: A %v, B %v, final %d; want both accepted and final 1 (one increment lost)", errA, errB, final)
	}
	// A stale holder's write after B's is refused.
	if err := wo.WriteIfNotOlder(ctx, a, 99); !errors.Is(err, guard.ErrStale) {
		t.Fatalf("write-only: stale write after B's = %v, want ErrStale", err)
	}
	// One holder may write more than once (fence equal to the stored one).
	if err := wo.WriteIfNotOlder(ctx, b, 2); err != nil {
		t.Fatalf("write-only: second write by B = %v", err)
	}

	cf, err := guard.CreatePGCounter(ctx, db, uniqueTable(t, db), 1)
	if err != nil {
		t.Fatal(err)
	}
	va, errA = cf.Claim(ctx, a)
	vb, errB = cf.Claim(ctx, b)
	if errA != nil || errB != nil {
		t.Fatalf("claims: %v %v", errA, errB)
	}
	errA = cf.WriteClaimed(ctx, a, va+1)
	errB = cf.WriteClaimed(ctx, b, vb+1)
	final, _ = cf.Read(ctx)
	if !errors.Is(errA, guard.ErrStale) || errB != nil || final != 1 {
		t.Fatalf("claim-first: A %v, B %v, final %d; want A stale, B accepted, final 1 (nothing lost: A knows it failed)", errA, errB, final)
	}
	if _, err := cf.Claim(ctx, a); !errors.Is(err, guard.ErrStale) {
		t.Fatalf("claim-first: a second claim by the stale holder = %v, want ErrStale", err)
	}
	if f, err := cf.Fence(ctx); err != nil || f != b {
		t.Fatalf("Fence = %d, %v; want %d", f, err, b)
	}
	t.Logf("write-only: both writes accepted, counter 1 after two increments; claim-first: A refused (%v)", errA)
}

// TestPGTable covers the generic helpers on a table with awkward names.
func TestPGTable(t *testing.T) {
	ctx := t.Context()
	db := pool(t)
	schema := `we"ird ü`
	if _, err := db.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	name := "job; DROP TABLE x --" + fmt.Sprint(time.Now().UnixNano())
	ident := pgx.Identifier{schema, name}
	if _, err := db.Exec(ctx, "CREATE TABLE "+ident.Sanitize()+` ("Job ID" text PRIMARY KEY, state text, tries int)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE "+ident.Sanitize()) })
	tab, err := guard.NewPGTableIdent(ident, "Job ID", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := tab.EnsureFenceColumn(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, "INSERT INTO "+ident.Sanitize()+` ("Job ID", state, tries) VALUES ('j1', 'new', 0)`); err != nil {
		t.Fatal(err)
	}
	var state string
	var tries int
	if err := tab.Claim(ctx, db, "j1", 10, []string{"state", "tries"}, &state, &tries); err != nil || state != "new" {
		t.Fatalf("Claim: %q %d %v", state, tries, err)
	}
	if err := tab.Claim(ctx, db, "j1", 10, nil); !errors.Is(err, guard.ErrStale) {
		t.Fatalf("second Claim with the same fence = %v, want ErrStale", err)
	}
	if err := tab.WriteClaimed(ctx, db, "j1", 10, []string{"state", "tries"}, "done", tries+1); err != nil {
		t.Fatalf("WriteClaimed: %v", err)
	}
	if err := tab.WriteClaimed(ctx, db, "j1", 9, []string{"state"}, "stale"); !errors.Is(err, guard.ErrStale) {
		t.Fatalf("WriteClaimed with an old fence = %v, want ErrStale", err)
	}
	if err := tab.WriteIfNotOlder(ctx, db, "j1", 10, []string{"state"}, "again"); err != nil {
		t.Fatalf("WriteIfNotOlder with the row's fence: %v", err)
	}
	if err := tab.WriteIfNotOlder(ctx, db, "j1", 11, []string{"state"}, "newer"); err != nil {
		t.Fatalf("WriteIfNotOlder with a newer fence: %v", err)
	}
	if err := tab.WriteClaimed(ctx, db, "j1", 10, []string{"state"}, "x"); !errors.Is(err, guard.ErrStale) {
		t.Fatalf("WriteClaimed after a newer write-only write = %v, want ErrStale", err)
	}
	if f, err := tab.Fence(ctx, db, "j1"); err != nil || f != 11 {
		t.Fatalf("Fence = %d %v, want 11", f, err)
	}
	for _, err := range []error{
		tab.Claim(ctx, db, "nope", 50, nil),
		tab.WriteClaimed(ctx, db, "nope", 50, []string{"state"}, "x"),
		tab.WriteIfNotOlder(ctx, db, "nope", 50, []string{"state"}, "x"),
	} {
		if !errors.Is(err, guard.ErrNotFound) || errors.Is(err, guard.ErrStale) {
			t.Errorf("on a missing row: %v, want ErrNotFound (not ErrStale)", err)
		}
	}
	// Inside a transaction (e.g. pgadvisory.Tx), through the same DB interface.
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Claim(ctx, tx, "j1", 12, nil); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	if f, _ := tab.Fence(ctx, db, "j1"); f != 11 {
		t.Fatalf("rolled-back claim left fence %d", f)
	}

	bad := []struct {
		what                   string
		table, id, fence       string
		f                      fencelock.Fence
		cols                   []string
		wantTableErr, wantBoth bool
	}{
		{what: "empty table", table: "", id: "id", wantTableErr: true},
		{what: "three parts", table: "a.b.c", id: "id", wantTableErr: true},
		{what: "long name", table: strings.Repeat("t", 64), id: "id", wantTableErr: true},
		{what: "NUL", table: "t\x00", id: "id", wantTableErr: true},
		{what: "bad UTF-8", table: "t", id: "\xff", wantTableErr: true},
		{what: "same id and fence", table: "t", id: "f", fence: "f", wantTableErr: true},
		{what: "fence 0", table: "t", id: "id", f: 0},
		{what: "fence over int64", table: "t", id: "id", f: math.MaxInt64 + 1},
		{what: "empty column", table: "t", id: "id", f: 1, cols: []string{""}},
	}
	for _, tc := range bad {
		tb, err := guard.NewPGTable(tc.table, tc.id, tc.fence)
		if tc.wantTableErr {
			if !errors.Is(err, guard.ErrInvalid) {
				t.Errorf("%s: NewPGTable = %v, want ErrInvalid", tc.what, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		cols := tc.cols
		if cols == nil {
			cols = []string{"state"}
		}
		err = tb.WriteClaimed(ctx, db, "j1", tc.f, cols, "x")
		if !errors.Is(err, guard.ErrInvalid) || !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("%s: WriteClaimed = %v, want ErrInvalid (guard's, which is fencelock's)", tc.what, err)
		}
	}
}

// TestPGCounterLostUpdates runs the lost-update experiment on a real table
// with real PostgreSQL leases: workers stall past the TTL without renewing
// in 5% of sections. Claim-first loses nothing; without fencing,
// increments are lost.
func TestPGCounterLostUpdates(t *testing.T) {
	ctx := t.Context()
	db := pool(t)
	url := testserver.SharedPostgres(t).URL()
	var lockers []fencelock.Locker
	for range 3 {
		c, err := fencelock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		lockers = append(lockers, c)
	}
	for _, m := range conformance.Modes() {
		res, err := guard.CreatePGCounter(ctx, db, uniqueTable(t, db), 1)
		if err != nil {
			t.Fatal(err)
		}
		cfg := conformance.LostUpdatesConfig{Name: fmt.Sprintf("%s-%s-%d", t.Name(), m, time.Now().UnixNano()), Sections: 60, Workers: 4, StallRate: 0.05, TTL: 100 * time.Millisecond}
		r, err := conformance.LostUpdates(ctx, lockers, res, m, cfg)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		t.Logf("%-11s sections %d stalled %d accepted %d rejected %d final %d lost %d (%v)",
			m, r.Sections, r.Stalled, r.Accepted, r.Rejected, r.Final, r.Lost, r.Elapsed.Round(time.Millisecond))
		switch m {
		case conformance.NoFencing:
			if r.Lost == 0 {
				t.Errorf("no fencing lost nothing with %d stalls past the TTL", r.Stalled)
			}
		case conformance.ClaimFirst:
			if r.Lost != 0 || r.Rejected == 0 {
				t.Errorf("claim-first lost %d, rejected %d; want 0 lost and the stale writes rejected", r.Lost, r.Rejected)
			}
		}
	}
}

// TestPGCounterConcurrentClaims: concurrent claims with distinct fences on
// one row: the row ends at the highest fence and every claim that lost the
// race is ErrStale, none silently ignored.
func TestPGCounterConcurrentClaims(t *testing.T) {
	ctx := t.Context()
	db := pool(t)
	c, err := guard.CreatePGCounter(ctx, db, uniqueTable(t, db), 7)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, stale := 0, 0
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			_, err := c.Claim(ctx, fencelock.Fence(i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, guard.ErrStale):
				stale++
			default:
				t.Errorf("claim %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if f, _ := c.Fence(ctx); f != n || ok+stale != n || ok == 0 {
		t.Fatalf("fence %d, %d claims ok, %d stale; want fence %d and every claim accounted for", f, ok, stale, n)
	}
}

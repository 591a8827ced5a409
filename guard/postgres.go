package guard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelock/fencelock/driver"
)

// DB runs the Postgres helpers' statements: *pgxpool.Pool, *pgx.Conn and
// pgx.Tx (including the lease transaction of pgadvisory.Tx) satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNotFound: the guarded row does not exist (a claim or write matched no
// row because there is none, not because of the fence).
var ErrNotFound = errors.New("guard: no such row")

// ErrInvalid: a bad table or column name, or a fence that is not a
// positive bigint. It is fencelock.ErrInvalid (driver.ErrInvalid), so one
// errors.Is check covers bad input to the lock and to its guard.
var ErrInvalid = driver.ErrInvalid

// PGTable is a Postgres table whose rows are guarded by a fence column
// (bigint NOT NULL DEFAULT 0): the resource side of fencing for rows of
// any shape. Make it with NewPGTable; it is immutable and safe for
// concurrent use. Every method takes the DB to run on, so the same table
// works through a pool, a connection, or a transaction.
//
// Claim-first (Claim, then WriteClaimed) loses no update: a newer holder's
// Claim makes every later write of an older holder fail with ErrStale.
// Write-only (WriteIfNotOlder) refuses writes older than the last write, but
// a stale holder that writes between a newer holder's read and its write is
// accepted, and the newer write then erases it (see the package doc). A
// refusal is an error wrapping ErrStale, never a silent 0-row update; a
// missing row is ErrNotFound.
type PGTable struct {
	table string // quoted, for SQL and messages
	id    string // quoted id column
	fence string // quoted fence column
}

// NewPGTable returns the guarded table table ("name" or "schema.name"),
// whose rows are identified by idColumn and guarded by fenceColumn ("" for
// "fence"). Names are taken literally (case and all) and quoted in SQL, so
// no name can inject SQL; each part must be 1 to 63 bytes of valid UTF-8
// without NUL (PostgreSQL would silently truncate longer names). A table
// name with a dot in it needs NewPGTableIdent.
func NewPGTable(table, idColumn, fenceColumn string) (*PGTable, error) {
	return NewPGTableIdent(pgx.Identifier(strings.Split(table, ".")), idColumn, fenceColumn)
}

// NewPGTableIdent is NewPGTable with the table name already split into its
// parts ({"schema", "name"} or {"name"}).
func NewPGTableIdent(table pgx.Identifier, idColumn, fenceColumn string) (*PGTable, error) {
	if fenceColumn == "" {
		fenceColumn = "fence"
	}
	if len(table) < 1 || len(table) > 2 {
		return nil, fmt.Errorf("%w: table name %q: want name or schema.name", ErrInvalid, strings.Join(table, "."))
	}
	for _, p := range append(append([]string{}, table...), idColumn, fenceColumn) {
		if err := checkIdent(p); err != nil {
			return nil, err
		}
	}
	if idColumn == fenceColumn {
		return nil, fmt.Errorf("%w: id and fence column are both %q", ErrInvalid, idColumn)
	}
	return &PGTable{
		table: table.Sanitize(),
		id:    pgx.Identifier{idColumn}.Sanitize(),
		fence: pgx.Identifier{fenceColumn}.Sanitize(),
	}, nil
}

func checkIdent(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty table or column name", ErrInvalid)
	case len(s) > 63:
		return fmt.Errorf("%w: name %q is %d bytes; PostgreSQL names are at most 63 bytes", ErrInvalid, s[:20]+"...", len(s))
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: name %q is not valid UTF-8", ErrInvalid, s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: name %q contains a NUL byte", ErrInvalid, s)
	}
	return nil
}

// quoteCols validates and quotes column names for SQL.
func quoteCols(cols []string) ([]string, error) {
	q := make([]string, len(cols))
	for i, c := range cols {
		if err := checkIdent(c); err != nil {
			return nil, err
		}
		q[i] = pgx.Identifier{c}.Sanitize()
	}
	return q, nil
}

// bigint checks that fence is a positive bigint.
func bigint(fence driver.Fence) (int64, error) {
	if fence == 0 || fence > math.MaxInt64 {
		return 0, fmt.Errorf("%w: fence %d: want the lease's Fence(), a positive bigint", ErrInvalid, fence)
	}
	return int64(fence), nil
}

// EnsureFenceColumn adds the fence column (bigint NOT NULL DEFAULT 0) to
// the table if it is missing. Existing rows get fence 0, which any lease's
// fence beats.
func (t *PGTable) EnsureFenceColumn(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, "ALTER TABLE "+t.table+" ADD COLUMN IF NOT EXISTS "+t.fence+" bigint NOT NULL DEFAULT 0")
	if err != nil {
		return fmt.Errorf("guard: add the fence column to %s: %w", t.table, err)
	}
	return nil
}

// Claim stamps fence on the row whose id column equals id, if fence is
// greater than the row's fence, and scans the columns named in returning
// into dest (none: nothing returned). It is
//
//	UPDATE t SET fence = $fence WHERE id = $id AND fence < $fence RETURNING <returning>
//
// It returns an error wrapping ErrStale if the row's fence is not lower
// (a newer holder claimed it: stop, the lease is stale), ErrNotFound if
// there is no such row.
func (t *PGTable) Claim(ctx context.Context, db DB, id any, fence driver.Fence, returning []string, dest ...any) error {
	f, err := bigint(fence)
	if err != nil {
		return err
	}
	cols, err := quoteCols(returning)
	if err != nil {
		return err
	}
	if len(dest) != len(cols) {
		return fmt.Errorf("%w: %d columns to return but %d destinations", ErrInvalid, len(cols), len(dest))
	}
	ret := "1"
	if len(cols) > 0 {
		ret = strings.Join(cols, ", ")
	}
	var one int
	if len(cols) == 0 {
		dest = []any{&one}
	}
	err = db.QueryRow(ctx, "UPDATE "+t.table+" SET "+t.fence+" = $2 WHERE "+t.id+" = $1 AND "+t.fence+" < $2 RETURNING "+ret, id, f).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return t.refusal(ctx, db, id, "claim", fence, "<")
	}
	if err != nil {
		return fmt.Errorf("guard: claim of %s row %v: %w", t.table, id, err)
	}
	return nil
}

// WriteClaimed sets the named columns of the row whose id column equals id
// to values, only while the row's fence still equals fence (no newer
// holder has claimed it since this lease's Claim):
//
//	UPDATE t SET c1 = $v1, ... WHERE id = $id AND fence = $fence
//
// It returns an error wrapping ErrStale otherwise, ErrNotFound if there is
// no such row.
func (t *PGTable) WriteClaimed(ctx context.Context, db DB, id any, fence driver.Fence, columns []string, values ...any) error {
	return t.write(ctx, db, id, fence, columns, values, "=", false)
}

// WriteIfNotOlder sets the named columns of the row whose id column equals
// id to values and stamps fence, if fence is at least the row's fence (so a
// holder may write more than once):
//
//	UPDATE t SET c1 = $v1, ..., fence = $fence WHERE id = $id AND fence <= $fence
//
// It returns an error wrapping ErrStale otherwise, ErrNotFound if there is
// no such row. This is write-only fencing; prefer Claim and WriteClaimed.
func (t *PGTable) WriteIfNotOlder(ctx context.Context, db DB, id any, fence driver.Fence, columns []string, values ...any) error {
	return t.write(ctx, db, id, fence, columns, values, "<=", true)
}

func (t *PGTable) write(ctx context.Context, db DB, id any, fence driver.Fence, columns []string, values []any, cmp string, stamp bool) error {
	f, err := bigint(fence)
	if err != nil {
		return err
	}
	cols, err := quoteCols(columns)
	if err != nil {
		return err
	}
	if len(cols) == 0 || len(cols) != len(values) {
		return fmt.Errorf("%w: %d columns and %d values: give one value per column, at least one", ErrInvalid, len(cols), len(values))
	}
	var sb strings.Builder
	sb.WriteString("UPDATE " + t.table + " SET ")
	for i, c := range cols {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(c + " = $" + strconv.Itoa(i+3))
	}
	if stamp {
		sb.WriteString(", " + t.fence + " = $2")
	}
	sb.WriteString(" WHERE " + t.id + " = $1 AND " + t.fence + " " + cmp + " $2")
	args := append([]any{id, f}, values...)
	tag, err := db.Exec(ctx, sb.String(), args...)
	if err != nil {
		return fmt.Errorf("guard: write to %s row %v: %w", t.table, id, err)
	}
	if tag.RowsAffected() == 0 {
		return t.refusal(ctx, db, id, "write", fence, cmp)
	}
	return nil
}

// Fence returns the fence stored in the row whose id column equals id.
func (t *PGTable) Fence(ctx context.Context, db DB, id any) (driver.Fence, error) {
	var f int64
	err := db.QueryRow(ctx, "SELECT "+t.fence+" FROM "+t.table+" WHERE "+t.id+" = $1", id).Scan(&f)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s has no row %v", ErrNotFound, t.table, id)
	}
	if err != nil {
		return 0, fmt.Errorf("guard: read the fence of %s row %v: %w", t.table, id, err)
	}
	return driver.Fence(f), nil
}

// refusal explains a 0-row update: ErrNotFound or ErrStale with the row's
// fence (read after the fact, so it may have moved on since).
func (t *PGTable) refusal(ctx context.Context, db DB, id any, what string, fence driver.Fence, cmp string) error {
	cur, err := t.Fence(ctx, db, id)
	if err != nil {
		return err
	}
	need := map[string]string{"<": "lower than", "=": "equal to", "<=": "at most"}[cmp]
	return fmt.Errorf("%w (%s with fence %d on %s row %v: its fence is %d, not %s %d)", ErrStale, what, fence, t.table, id, cur, need, fence)
}

var _ Resource = (*PGCounter)(nil)

// PGCounter is a guarded integer in one row of a Postgres table with
// columns id bigint PRIMARY KEY, value bigint, fence bigint: Resource on a
// real database, for the lost-update experiment and as a worked example of
// PGTable. Safe for concurrent use.
type PGCounter struct {
	db DB
	t  *PGTable
	id int64
}

// CreatePGCounter creates table (if it does not exist) with columns id
// bigint PRIMARY KEY, value bigint NOT NULL DEFAULT 0, fence bigint NOT NULL
// DEFAULT 0, inserts row id (if missing, at value 0 and fence 0), and
// returns the counter in that row. table is "name" or "schema.name". Two
// sessions creating the same table at the same moment can race in
// PostgreSQL's catalog: create it once, before the workers start.
func CreatePGCounter(ctx context.Context, db DB, table string, id int64) (*PGCounter, error) {
	c, err := NewPGCounter(db, table, id)
	if err != nil {
		return nil, err
	}
	_, err = db.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+c.t.table+" (id bigint PRIMARY KEY, value bigint NOT NULL DEFAULT 0, fence bigint NOT NULL DEFAULT 0)")
	if err == nil {
		_, err = db.Exec(ctx, "INSERT INTO "+c.t.table+" (id) VALUES ($1) ON CONFLICT (id) DO NOTHING", id)
	}
	if err != nil {
		return nil, fmt.Errorf("guard: create counter %s row %d: %w", c.t.table, id, err)
	}
	return c, nil
}

// NewPGCounter returns the counter in row id of an existing table with
// columns id, value and fence (see CreatePGCounter). It does no I/O.
func NewPGCounter(db DB, table string, id int64) (*PGCounter, error) {
	t, err := NewPGTable(table, "id", "fence")
	if err != nil {
		return nil, err
	}
	return &PGCounter{db: db, t: t, id: id}, nil
}

var valueCol = []string{"value"}

// Read returns the value without any fence check (the unfenced mode).
func (c *PGCounter) Read(ctx context.Context) (int64, error) {
	var v int64
	err := c.db.QueryRow(ctx, "SELECT value FROM "+c.t.table+" WHERE id = $1", c.id).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s has no row %d", ErrNotFound, c.t.table, c.id)
	}
	if err != nil {
		return 0, fmt.Errorf("guard: read %s row %d: %w", c.t.table, c.id, err)
	}
	return v, nil
}

// Write sets the value without any fence check (the unfenced mode).
func (c *PGCounter) Write(ctx context.Context, v int64) error {
	tag, err := c.db.Exec(ctx, "UPDATE "+c.t.table+" SET value = $2 WHERE id = $1", c.id, v)
	if err != nil {
		return fmt.Errorf("guard: write %s row %d: %w", c.t.table, c.id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s has no row %d", ErrNotFound, c.t.table, c.id)
	}
	return nil
}

// Claim stamps fence if it is greater than the row's fence and returns the
// value; ErrStale otherwise.
func (c *PGCounter) Claim(ctx context.Context, fence driver.Fence) (int64, error) {
	var v int64
	if err := c.t.Claim(ctx, c.db, c.id, fence, valueCol, &v); err != nil {
		return 0, err
	}
	return v, nil
}

// WriteClaimed writes v only while the row's fence equals fence; ErrStale
// otherwise.
func (c *PGCounter) WriteClaimed(ctx context.Context, fence driver.Fence, v int64) error {
	return c.t.WriteClaimed(ctx, c.db, c.id, fence, valueCol, v)
}

// WriteIfNotOlder writes v and stamps fence if fence is at least the row's
// fence; ErrStale otherwise.
func (c *PGCounter) WriteIfNotOlder(ctx context.Context, fence driver.Fence, v int64) error {
	return c.t.WriteIfNotOlder(ctx, c.db, c.id, fence, valueCol, v)
}

// Fence returns the highest fence the row has seen.
func (c *PGCounter) Fence(ctx context.Context) (driver.Fence, error) {
	return c.t.Fence(ctx, c.db, c.id)
}

// Table returns the counter's table, for PGTable's other methods.
func (c *PGCounter) Table() *PGTable { return c.t }

package pgadvisory

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// layout names where an acquire batch's values are among its results: a
// pipelined batch returns one result per statement (BEGIN and COMMIT
// included), and each value is one column of a result's one row.
type layout struct {
	results  int  // how many results the batch returns
	lastCols int  // how many columns its last result's row has
	fence    cell // pg_current_xact_id()::text: NULL when the lock was not taken
	// Strict batches only: takeOver's result, "t" once the lease's
	// transaction holds the lock the session took in part 1.
	tookOver *cell
}

// cell is column col of the one row of result number result.
type cell struct{ result, col int }

func (c cell) in(rs []*pgconn.Result) []byte { return rs[c.result].Rows[0][c.col] }

// The layouts of the acquire batches, statement by statement.
var (
	// tryStrictQuery: BEGIN; SELECT (fence, ROW(WAL message,
	// synchronous_commit, fencelock.held)); COMMIT; BEGIN; SELECT (TTL
	// setting, took over).
	tryStrictLayout = layout{results: 5, lastCols: 2, fence: cell{1, 0}, tookOver: &cell{4, 1}}
	// tryQuery: BEGIN; SELECT (TTL setting, fence).
	tryLayout = layout{results: 2, lastCols: 2, fence: cell{1, 1}}
	// waitQuery, strict: BEGIN; SELECT (settings); SELECT (fence, ROW(WAL
	// message, synchronous_commit)) FROM (lock); COMMIT; BEGIN; SELECT
	// (TTL setting, took over).
	waitStrictLayout = layout{results: 6, lastCols: 2, fence: cell{2, 0}, tookOver: &cell{5, 1}}
	// waitQuery, not strict: BEGIN; SELECT (settings); SELECT (fence,
	// restored timeouts) FROM (lock).
	waitLayout = layout{results: 3, lastCols: 2, fence: cell{2, 0}}
	// foldedWaitQuery: BEGIN; SELECT (fence), or no row.
	foldedWaitLayout = layout{results: 2, lastCols: 1, fence: cell{1, 0}}
)

// fenceIn checks the results rs of a batch of layout l and returns its
// fence: nil when the lock was not taken (a try that missed).
func (l layout) fenceIn(rs []*pgconn.Result) ([]byte, error) {
	if err := resultErr(rs, l.results, l.lastCols); err != nil {
		return nil, err
	}
	fv := l.fence.in(rs)
	if l.tookOver != nil && fv != nil {
		if got := l.tookOver.in(rs); string(got) != "t" {
			return nil, fmt.Errorf("pgadvisory: the lease's transaction did not take over the session's lock (got %q)", got)
		}
	}
	return fv, nil
}

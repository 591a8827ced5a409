package pgadvisory

// Statements and protocols (internals).
//
// Every grant is one round trip of several statements (the layouts in
// layout.go). How they are sent follows the pool's
// ConnConfig.DefaultQueryExecMode, as the application's own pgx queries
// on the pool are:
//
//   - cache_statement (pgx's default): each statement is a named prepared
//     statement, parsed and planned once per connection (its first use
//     costs one more round trip per statement) and then bound and executed
//     with its arguments, all statements pipelined in one round trip that
//     ends in one Sync. The server then does no parsing per grant: with
//     8 clients contending on one name this took the flush-off grants from
//     about 5,200/s to 7,400/s, next to 7,900/s for the bare lock and fence
//     statements (measured with raw pgconn, interleaved, 2-core VM).
//   - any other mode (simple_protocol, exec, cache_describe, describe_exec;
//     what one sets behind PgBouncer in transaction pooling mode before
//     1.21): the statements, with their arguments as literals, go as one
//     simple-protocol query, prepared nothing.
//
// With Config.LabelAppName the grants use the simple protocol too: the
// label's set_config runs before BEGIN, and in one simple query it joins
// the transaction that a missed try rolls back.

import (
	"context"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// query is a grant's statements, in order. Statement SQL names its
// arguments $1, $2, … (each with an explicit cast), numbered per
// statement; args maps them to the query's arguments, all passed as text.
type query struct {
	stmts []stmt
}

type stmt struct {
	sql  string
	name string // prepared statement name: fencelock_ and a hash of sql
	args []int  // the query argument of each of $1, $2, …
}

// newQuery builds a query of statements given as SQL, each followed by
// the indexes of its arguments' query arguments: newQuery("BEGIN", nil,
// "SELECT $1::bigint", []int{0}).
func newQuery(parts ...any) *query {
	q := &query{}
	for i := 0; i < len(parts); i += 2 {
		sql := parts[i].(string)
		args, _ := parts[i+1].([]int)
		h := fnv.New64a()
		_, _ = h.Write([]byte(sql))
		q.stmts = append(q.stmts, stmt{sql: sql, name: "fencelock_" + strconv.FormatUint(h.Sum64(), 36), args: args})
	}
	return q
}

// text is q as one simple-protocol query: its statements joined with
// "; ", each $n replaced by its argument as a quoted literal (args are
// numbers or labels; see quoteLiteral).
func (q *query) text(args [][]byte) string {
	var sb strings.Builder
	sb.Grow(768)
	for i, s := range q.stmts {
		if i > 0 {
			sb.WriteString("; ")
		}
		sql := s.sql
		for {
			j := strings.IndexByte(sql, '$')
			if j < 0 {
				sb.WriteString(sql)
				break
			}
			sb.WriteString(sql[:j])
			k := j + 1
			for k < len(sql) && sql[k] >= '0' && sql[k] <= '9' {
				k++
			}
			n, _ := strconv.Atoi(sql[j+1 : k])
			sb.WriteString(literal(string(args[s.args[n-1]])))
			sql = sql[k:]
		}
	}
	return sb.String()
}

// prepared reports whether grants on c use prepared statements (see
// atop this file). The exec mode is read once per connection and kept in
// its pgconn CustomData: c.Config() copies the whole configuration.
func prepared(c *pgx.Conn, labels bool) bool {
	if labels {
		return false
	}
	data := c.PgConn().CustomData()
	v, ok := data[preparedKey].(bool)
	if !ok {
		v = c.Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
		data[preparedKey] = v
	}
	return v
}

// preparedKey is the key of prepared's answer in a connection's pgconn
// CustomData.
const preparedKey = "fencelock.prepared"

// batch prepares q's statements on c (once per connection: pgx keeps
// them) and returns the pipeline that binds and executes them with args,
// already encoded as text (see grantArgs).
func (q *query) batch(ctx context.Context, c *pgx.Conn, args [][]byte) (*pgconn.Batch, error) {
	var b pgconn.Batch
	var vals [4][]byte
	for _, s := range q.stmts {
		sd, err := c.Prepare(ctx, s.name, s.sql)
		if err != nil {
			return nil, err
		}
		for i, a := range s.args {
			vals[i] = args[a]
		}
		b.ExecStatement(sd, vals[:len(s.args)], nil, nil) // encodes them at once
	}
	return &b, nil
}

// literal is a as a quoted literal: a number as is, else quoteLiteral.
func literal(a string) string {
	if _, err := strconv.ParseInt(a, 10, 64); err == nil {
		return "'" + a + "'"
	}
	return quoteLiteral(a)
}

// pending is a grant query ready to go on one connection: a pipeline of
// prepared statements (bt), or else one simple query (sql).
type pending struct {
	pg  *pgconn.PgConn
	sql string
	bt  *pgconn.Batch
}

// run sends the query under ctx.
func (s pending) run(ctx context.Context) *pgconn.MultiResultReader {
	if s.bt != nil {
		return s.pg.ExecBatch(ctx, s.bt)
	}
	return s.pg.Exec(ctx, s.sql)
}

// send readies q with args on pc's connection, to be started under a ctx
// given later: a pipeline of prepared statements or one simple query (see
// atop this file), label's statement first if any (simple query only:
// labels are off with prepared statements). Preparing a statement on its
// first use on the connection is a round trip under ctx.
func (b *backend) send(ctx context.Context, pc *pgxpool.Conn, label string, q *query, args [][]byte) (pending, error) {
	pg := pc.Conn().PgConn()
	if !prepared(pc.Conn(), b.labels) {
		return pending{pg: pg, sql: labelSQL(label) + q.text(args)}, nil
	}
	bt, err := q.batch(ctx, pc.Conn(), args)
	if err != nil {
		return pending{}, err
	}
	return pending{pg: pg, bt: bt}, nil
}

// readAll is MultiResultReader.ReadAll in fewer allocations (one for a
// grant's usual results, where ReadAll takes about four per result): the
// results, their rows and the values copied into one block. Results carry
// no FieldDescriptions.
func readAll(mrr *pgconn.MultiResultReader) ([]*pgconn.Result, error) {
	blk := new(resultBlock)
	rs, cells, buf := blk.ptrs[:0], blk.cells[:0], blk.buf[:0]
	for mrr.NextResult() {
		n := len(rs)
		var r *pgconn.Result
		if n < len(blk.res) {
			r = &blk.res[n]
		} else {
			r = new(pgconn.Result)
		}
		rr := mrr.ResultReader()
		for rr.NextRow() {
			if r.Rows == nil && n < len(blk.rows) {
				r.Rows = blk.rows[n][:0]
			}
			vals := rr.Values()
			if len(cells)+len(vals) > cap(cells) {
				cells = make([][]byte, 0, max(len(vals), cap(cells)))
			}
			row := cells[len(cells) : len(cells)+len(vals) : len(cells)+len(vals)]
			cells = cells[:len(cells)+len(vals)]
			for i, v := range vals {
				if v == nil {
					row[i] = nil
					continue
				}
				if len(buf)+len(v) > cap(buf) {
					buf = make([]byte, 0, max(len(v), 2*cap(buf)))
				}
				at := len(buf)
				buf = append(buf, v...)
				row[i] = buf[at:len(buf):len(buf)]
			}
			r.Rows = append(r.Rows, row)
		}
		r.CommandTag, r.Err = rr.Close()
		rs = append(rs, r)
	}
	return rs, mrr.Close()
}

// resultBlock is the storage of readAll's results, sized for a grant's
// (at most six results of a row each).
type resultBlock struct {
	res   [6]pgconn.Result
	ptrs  [6]*pgconn.Result
	rows  [6][1][][]byte
	cells [12][]byte
	buf   [192]byte
}

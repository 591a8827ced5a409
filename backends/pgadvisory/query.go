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
func (q *query) text(args ...string) string {
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
			sb.WriteString(literal(args[s.args[n-1]]))
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
// them) and returns the pipeline that binds and executes them with args.
func (q *query) batch(ctx context.Context, c *pgx.Conn, args ...string) (*pgconn.Batch, error) {
	var b pgconn.Batch
	vals := make([][]byte, 0, 4)
	for _, s := range q.stmts {
		sd, err := c.Prepare(ctx, s.name, s.sql)
		if err != nil {
			return nil, err
		}
		vals = vals[:0] // ExecStatement has encoded the previous ones
		for _, a := range s.args {
			vals = append(vals, []byte(args[a]))
		}
		b.ExecStatement(sd, vals, nil, nil)
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

// send starts q with args on pc's connection under a ctx given later: a
// pipeline of prepared statements or one simple query (see atop this
// file), label's statement first if any (simple query only: labels are
// off with prepared statements). Preparing a statement on its first use
// on the connection is a round trip under ctx.
func (b *backend) send(ctx context.Context, pc *pgxpool.Conn, label string, q *query, args ...string) (func(context.Context) *pgconn.MultiResultReader, error) {
	pg := pc.Conn().PgConn()
	if !prepared(pc.Conn(), b.labels) {
		sql := labelSQL(label) + q.text(args...)
		return func(ctx context.Context) *pgconn.MultiResultReader { return pg.Exec(ctx, sql) }, nil
	}
	bt, err := q.batch(ctx, pc.Conn(), args...)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) *pgconn.MultiResultReader { return pg.ExecBatch(ctx, bt) }, nil
}

package pgadvisory

// Labels and Inspect (internals; the package doc in doc.go has what users need).
//
// Inspect is one query on pg_locks (held, and sessions queued in the
// server's lock queue). The server exposes neither the holder's fence nor
// its idle timeout to other sessions, and Inspect does not report them;
// sessions polling because Config.MaxWaitConns are in use are not queued
// and not counted. Labels are kept only with Config.LabelAppName
// (label_app_name=true): the label is then the holder session's
// application_name, which pg_stat_activity shows to anyone (as a Python
// blake2b or psql user would label theirs); the grant's own query starts
// by setting it, so the lock is never held, nor waited for, under another
// name, and Release resets it (RESET application_name) with its COMMIT.
// PostgreSQL keeps at most 63 bytes of printable ASCII there, so the
// backend then declares MaxLabel 63 and LabelASCII. It is off by default
// because it replaces the application_name the pool was opened with,
// which monitoring may rely on to find the sessions.

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelock/fencelock/driver"
)

var (
	_ driver.Inspector = (*backend)(nil)
	_ driver.Relabeler = (*lease)(nil)
)

// maxLabel is the longest label the backend keeps: the holder session's
// application_name, which PostgreSQL truncates to NAMEDATALEN-1 bytes.
const maxLabel = 63

// label is the label a grant of req sets: none without
// Config.LabelAppName.
func (b *backend) label(req driver.AcquireRequest) string {
	if !b.labels {
		return ""
	}
	return req.Label
}

// labelSQL is the statement that a grant's query starts with: the label
// as the session's application_name, set before the lock is taken, so
// that pg_stat_activity shows it for as long as the session holds (or
// waits for) the lock. (In a simple query, statements before an explicit
// BEGIN join its transaction: a try that misses rolls it back with the
// lease's; Release's RESET gives the pool's connection its own back.)
func labelSQL(label string) string {
	if label == "" {
		return ""
	}
	return "SELECT set_config('application_name', " + quoteLiteral(label) + ", false); "
}

// dropLabelResult drops the result of labelSQL's statement from rs.
func dropLabelResult(label string, rs []*pgconn.Result) []*pgconn.Result {
	if label == "" || len(rs) == 0 || rs[0].Err != nil {
		return rs
	}
	return rs[1:]
}

// execLabelled is execDetached of labelSQL(label) + sql, without the
// label's result.
func execLabelled(ctx context.Context, pg *pgconn.PgConn, label, sql string) ([]*pgconn.Result, error) {
	rs, err := execDetached(ctx, pg, labelSQL(label)+sql)
	return dropLabelResult(label, rs), err
}

// SetLabel implements driver.Relabeler: the session's application_name,
// set in the lease's transaction (one statement on its connection), which
// pg_stat_activity shows until the lease ends (see labelSQL). Labels over
// 63 bytes are refused (the portable layer never sends them:
// Capabilities.Inspect.MaxLabel).
func (l *lease) SetLabel(ctx context.Context, label string) error {
	if !l.b.labels {
		return fmt.Errorf("%w: pgadvisory keeps labels only with label_app_name=true (Config.LabelAppName)", driver.ErrInvalid)
	}
	if len(label) > maxLabel {
		return fmt.Errorf("%w: label is %d bytes, over PostgreSQL's %d-byte application_name", driver.ErrInvalid, len(label), maxLabel)
	}
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
	if l.ended != nil {
		return l.ended
	}
	if err := l.checkLocked(); err != nil {
		return err
	}
	pg := l.pc.Conn().PgConn()
	sql := "SELECT set_config('application_name', " + quoteLiteral(label) + ", false)"
	_, err := execDetached(ctx, pg, sql)
	if err == nil {
		return nil
	}
	if !pg.IsClosed() && !fatal(err) && pg.TxStatus() != 'I' {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (pgadvisory: label not sent: %v)", ctxErr(ctx), err)
		}
		return fmt.Errorf("%w: pgadvisory: label: %w", driver.ErrUnavailable, err)
	}
	return l.loseLocked("its connection broke while labelling", err)
}

// quoteLiteral is s as an escape string literal, whatever
// standard_conforming_strings says.
func quoteLiteral(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}

// Inspect implements driver.Inspector with one query on pg_locks (the
// advisory lock of the name: granted, and sessions queued for it) joined
// with pg_stat_activity (the holder session's application_name, which is
// the label of a fencelock holder and whatever another client set). The
// server does not expose the holder's fence or its idle timeout to other
// sessions: neither is reported. Sessions polling because
// Config.MaxWaitConns are in use are not queued, and not counted.
func (b *backend) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	key := Key(name)
	hi, lo := int64(uint64(key)>>32), int64(uint32(key))
	var held, waiting int
	var label *string
	err := b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE l.granted), count(*) FILTER (WHERE NOT l.granted),
			(array_agg(a.application_name) FILTER (WHERE l.granted))[1]
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1`, hi, lo).Scan(&held, &waiting, &label)
	if err != nil {
		return driver.LockInfo{}, storeErr(ctx, "inspect (pg_locks)", err)
	}
	info := driver.LockInfo{Held: held > 0, Waiters: waiting}
	if info.Held && label != nil && b.labels {
		info.Label = *label
	}
	return info, nil
}

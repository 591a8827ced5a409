package pgadvisory

// Labels and Inspect (internals; the package doc in doc.go has what users need).
//
// Inspect is one query on pg_locks (held, and sessions queued in the
// server's lock queue); with labels, one round trip of three (see
// Inspect). The server exposes neither the holder's fence nor
// its idle timeout to other sessions, and Inspect does not report them;
// sessions polling because Config.MaxWaitConns are in use are not queued
// and not counted. Labels are kept only with Config.LabelAppName
// (label_app_name=true): the label is then the holder session's
// application_name, which pg_stat_activity shows to anyone (as a Python
// blake2b or psql user would label theirs); the grant's own query starts
// by setting it, so the lock is never held, nor waited for, under another
// name, and Release resets it (RESET application_name) after its COMMIT.
// PostgreSQL keeps at most 63 bytes of printable ASCII there, so the
// backend then declares MaxLabel 63 and LabelASCII. It is off by default
// because it replaces the application_name the pool was opened with,
// which monitoring may rely on to find the sessions.

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
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

// Inspect implements driver.Inspector: the advisory lock of the name in
// pg_locks (granted, and sessions queued for it) and the holder session's
// application_name in pg_stat_activity (the label of a fencelock holder,
// and whatever another client set). The server does not expose the
// holder's fence or its idle timeout to other sessions: neither is
// reported. Sessions polling because Config.MaxWaitConns are in use are not
// queued, and not counted.
//
// The two views are read at different instants, and a pool connection
// that releases and is granted again changes its application_name in
// between (RESET at release, the next label before the next grant): one
// read of both could pair a hold with the name of the connection between
// two holds (seen as an empty label by package election's Observe). So
// Inspect reads, in one round trip, pg_locks, then the holder's name, then
// pg_locks again. It keeps the answer if the same transaction
// (virtualtransaction) held the lock at both reads of pg_locks, since its
// name was read while it held (a transaction-level lock is held until its
// transaction ends), or if the lock was free at the third read (then
// that read is the answer). Otherwise it reads again, at most
// maxInspectReads times, and then fails with ErrUnavailable. Without
// Config.LabelAppName there is no label to pair: one read of pg_locks.
func (b *backend) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	key := Key(name)
	hi, lo := int64(uint64(key)>>32), int64(uint32(key))
	if !b.labels { // no label to pair with the hold: one read of pg_locks
		var held, waiting int
		var pid *int32
		var vxid *string
		err := b.pool.QueryRow(ctx, inspectLocks, hi, lo).Scan(&held, &waiting, &pid, &vxid)
		if err != nil {
			return driver.LockInfo{}, storeErr(ctx, "inspect (pg_locks)", err)
		}
		return driver.LockInfo{Held: held > 0, Waiters: waiting}, nil
	}
	for range maxInspectReads {
		info, consistent, err := b.inspectOnce(ctx, hi, lo)
		if err != nil {
			return driver.LockInfo{}, storeErr(ctx, "inspect (pg_locks)", err)
		}
		if consistent {
			return info, nil
		}
	}
	return driver.LockInfo{}, fmt.Errorf("%w: pgadvisory: inspect: the lock changed hands during each of %d reads, so its holder's label could not be read", driver.ErrUnavailable, maxInspectReads)
}

// maxInspectReads bounds Inspect's reads when the holder keeps changing.
const maxInspectReads = 10

const (
	inspectLocks = `SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted),
			(array_agg(pid) FILTER (WHERE granted))[1], (array_agg(virtualtransaction) FILTER (WHERE granted))[1]
		FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1`
	inspectName = `SELECT a.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1 AND l.granted`
)

// inspectOnce is one of Inspect's reads; consistent is false when the
// holder changed between the two reads of pg_locks.
func (b *backend) inspectOnce(ctx context.Context, hi, lo int64) (info driver.LockInfo, consistent bool, err error) {
	var bt pgx.Batch
	var held, waiting, held2, waiting2 int
	var pid, pid2 *int32
	var vxid, vxid2 *string
	var namePid *int32
	var label *string
	bt.Queue(inspectLocks, hi, lo).QueryRow(func(r pgx.Row) error { return r.Scan(&held, &waiting, &pid, &vxid) })
	bt.Queue(inspectName, hi, lo).Query(func(rows pgx.Rows) error {
		for rows.Next() { // the holder the first read found (shared holds: several)
			var p int32
			var n *string
			if err := rows.Scan(&p, &n); err != nil {
				return err
			}
			if pid != nil && p == *pid {
				namePid, label = &p, n
			}
		}
		return rows.Err()
	})
	bt.Queue(inspectLocks, hi, lo).QueryRow(func(r pgx.Row) error { return r.Scan(&held2, &waiting2, &pid2, &vxid2) })
	if err := b.pool.SendBatch(ctx, &bt).Close(); err != nil {
		return driver.LockInfo{}, false, err
	}
	info = driver.LockInfo{Held: held > 0, Waiters: waiting}
	if !info.Held {
		return info, true, nil
	}
	if held2 == 0 { // free at the third read: that is the answer
		return driver.LockInfo{Waiters: waiting2}, true, nil
	}
	same := held2 > 0 && pid != nil && pid2 != nil && *pid == *pid2 && vxid != nil && vxid2 != nil && *vxid == *vxid2 &&
		namePid != nil && *namePid == *pid
	// A vxid whose local part is 0 is a session between transactions: one
	// committing (pg_locks still lists its locks), or holding at session
	// level, as another client's session may, between its transactions.
	consistent = same && !strings.HasSuffix(*vxid, "/0")
	if consistent && label != nil {
		info.Label = *label
	}
	return info, consistent, nil
}

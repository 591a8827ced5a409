// Package pgadvisory is the PostgreSQL backend of fencelock: a lease is a
// transaction holding pg_advisory_xact_lock on a 64-bit key derived from the
// lock name, with a fencing token issued by the server. It uses pgx v5
// (pgxpool) and registers the URL schemes postgres:// and postgresql://.
// PostgreSQL 13 or later is required (pg_current_xact_id); connect to the
// primary. It works behind PgBouncer in transaction pooling mode.
//
// A grant's statements are prepared as the pool's own queries are: in
// pgx's default exec mode (cache_statement) once per connection, then
// bound and pipelined in one round trip, so the server parses nothing per
// grant; in any other mode (set one, such as
// default_query_exec_mode=simple_protocol, behind PgBouncer before 1.21,
// as for any pgx pool there) they go as one simple query.
//
// # Opening
//
// With the package imported (a blank import suffices), by URL:
//
//	locks, err := fencelock.Open(ctx, "postgres://app@db:5432/app?ttl=10s")
//
// The URL is a pgx connection string,
// postgres://[user[:password]@]host[:port][,host[:port]...]/database.
// Query parameters, besides fencelock's own prefix, ttl and wait:
//
//	fence_flush=false    Config.NoFenceFlush (default: the fence is flushed)
//	label_app_name=true  Config.LabelAppName (default false)
//	conn_timeout=5s      Config.ConnTimeout (default 5s, DefaultConnTimeout)
//	max_wait_conns=N     Config.MaxWaitConns (default half the pool, at least 1)
//
// plus pgx and pgxpool parameters (sslmode, pool_max_conns, ...) and
// PostgreSQL run-time parameters (application_name, search_path, ...; see
// URLOpener); any other is rejected with [fencelock.ErrInvalid]. In Go, New
// takes a *pgxpool.Pool (not closed by the Client) and optionally a
// [Config].
//
// Each held lease and each waiting Acquire keeps one pool connection
// checked out, idle in its transaction, and pins a server connection (behind
// PgBouncer too): size pool_max_conns and max_connections for them, and
// for thousands of concurrent leases pick another backend. When the pool is
// exhausted an attempt fails after ConnTimeout with an error wrapping
// [fencelock.ErrUnavailable], never a silent block.
//
// # Fences and TTL
//
// The fence is a transaction ID (pg_current_xact_id()) taken while the
// session holds the lock: 64-bit, cluster-wide, never reused, never 0. By
// default it is the ID of a transaction committed durably (one WAL flush)
// before the grant returns, so it survives a server crash:
// [driver.FenceStrict]. With fence_flush=false it is the lease
// transaction's ID, which a crash can repeat: [driver.FenceBestEffort]. The
// TTL is enforced by the server: idle_in_transaction_session_timeout is set
// to it, and a renewal is one statement on the lease's connection. The minimum
// TTL is 10 ms, [MaxTTL] about 24.8 days. Blocked Acquires wait in the server's
// own lock queue (FIFO) and are granted the moment the holder commits.
// A wait lifts statement_timeout and lock_timeout for itself and has the
// server check every second that its client is still there; with
// fence_flush=false that check (client_connection_check_interval = 1s,
// PostgreSQL 14 and later) is set for the pool connection's session, where
// it had none, and stays for its later users.
//
// What the default costs: each grant waits for one WAL flush, and its
// round trip runs two transactions, the fence's (flushed) and the
// lease's own (the TTL, the lock taken over from the first). Neither can
// go: a fence no flushed WAL record names can repeat after a crash, and
// the lease must be a transaction of its own for the server-enforced TTL
// and for [Tx]. The second transaction costs about 40 µs of server time,
// so an uncontended TryAcquire+Release stays above raw pgx (Begin, SELECT
// pg_try_advisory_xact_lock, Commit) plus one flushed commit: on a 2-core
// VM with fsync on, 295–418 µs against 86–111 + 210–266 µs (1.0–1.3×;
// six `make bench-peers` runs, 2026-12-07; 1.2× in two the day before),
// and 1.0–1.6× of the two in
// BenchmarkAcquireReleaseFsync (interleaved, the upper end on a machine
// whose disk others kept busy).
// With fence_flush=false a grant is one transaction and matches raw pgx
// uncontended; every fence still costs a transaction ID, whose COMMIT
// writes a WAL record that raw pgx's lock transaction does not. With 8
// clients contending on one name a hand-off takes the same round trips as
// raw pgx's, and the grants run at 0.7–0.9× raw pgx's rate on a 2-core
// VM, by the measure (about the rate of raw pgx taking a transaction ID
// with the lock: the transaction ID, and client work per grant; the
// measurements are in fence.go). A hand-off (the holder's Release to the
// blocked waiter holding) takes 1.1–1.4× raw pgx's, and so does raw pgx
// when both its transactions take a transaction ID: BenchmarkHandOff,
// 2026-12-07, 118–138 µs against raw pgx's 91–104 and the fenced raw
// hand-off's 89–137.
//
// # A broken connection
//
// PostgreSQL frees an advisory lock the moment the server sees the holder's
// connection reset, and grants the next waiter at once, before the holder
// can know. The holder learns of it at the watcher's next sweep (every
// 25 ms), so both may believe they hold the lock for a short time:
// Capabilities.BreakOverlap declares 50 ms (measured 5–25 ms). Fences
// still rise, so a resource that checks them (package guard), or the
// transaction-scoped mode below, refuses the old holder's writes; work
// guarded by the lock alone is not protected in that window. Every other
// backend has BreakOverlap 0. A connection that stays open while nothing
// passes is not such a case. With asynchronous replicas, a failover can
// lose a lock and its fence, as it can lose any commit (NodeLoss is
// [driver.NodeLossUnsafe]).
//
// # Transaction-scoped mode
//
// [Tx] (or [fencelock.Lease.As] with a *pgx.Tx) returns the lease's own
// transaction. Writes made through it commit in the COMMIT that releases
// the lock, so they apply only if the lock was held without a break: the
// strongest mode for data in the same database.
//
// # Interop with other advisory lock users
//
// The advisory key of a name (after [fencelock.Options].Prefix) is
// [Key](name): BLAKE2b with an 8-byte digest of the UTF-8 name, read
// big-endian as a signed int64, the number Python computes with
//
//	int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)
//
// so a worker in any language taking pg_advisory_xact_lock (or
// pg_advisory_lock) on that number excludes fencelock's holders of the
// name, and the reverse. The key space is shared with every other user of
// single-bigint advisory locks in the database; two names collide with
// probability 2⁻⁶⁴ (they then share one lock). Use Options.Prefix as a
// namespace when several applications share a database.
//
// # Inspect
//
// [fencelock.Client.Inspect] reports whether the name is held and how many
// sessions wait in the server's queue; neither the fence nor the remaining
// TTL. Labels only with label_app_name=true: the label is then the holder
// session's application_name, visible in pg_stat_activity, at most 63
// bytes of printable ASCII.
//
// # As
//
// [fencelock.Client.As] gives **pgxpool.Pool; [fencelock.Lease.As] gives
// *pgx.Tx while the lease is held.
package pgadvisory

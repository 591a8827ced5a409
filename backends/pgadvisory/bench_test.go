package pgadvisory_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// reportLatencies reports the median and p99 of lat, in µs.
func reportLatencies(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkAcquireRelease compares, in one run on one server, an
// uncontended fencelock TryAcquire+Release with the raw pgx way of taking a
// transaction-scoped advisory lock: pool.Begin, SELECT
// pg_try_advisory_xact_lock, COMMIT ("raw-tx"), and the same pipelined in
// one batch ("raw-batched", the fastest raw form). The variants run
// interleaved, one of each per iteration, so that load from elsewhere on
// the machine hits them alike; each reports its p50 and p99 (µs), and the
// ratios of the fencelock p50s to raw-tx's.
//
//	go test -run '^$' -bench AcquireRelease -benchtime 5000x ./backends/pgadvisory/
func BenchmarkAcquireRelease(b *testing.B) {
	acquireRelease(b, testserver.SharedPostgres(b).URL(), false)
}

// BenchmarkAcquireReleaseFsync is BenchmarkAcquireRelease on a server that
// flushes its WAL as production servers do (fsync, full_page_writes and
// synchronous_commit on), with one more variant interleaved: a flushed
// commit ("flushed-commit": an autocommit transactional WAL message, one
// WAL flush). It reports the strict fence's p50 over raw-tx's plus the
// flushed commit's (the target: at most 1).
//
//	go test -run '^$' -bench AcquireReleaseFsync -benchtime 3000x ./backends/pgadvisory/
func BenchmarkAcquireReleaseFsync(b *testing.B) {
	p := testserver.StartPostgresProcess(b, "-c", "fsync=on", "-c", "full_page_writes=on", "-c", "synchronous_commit=on")
	acquireRelease(b, p.URL(), true)
}

func acquireRelease(b *testing.B, url string, flushed bool) {
	ctx := b.Context()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	key := pgadvisory.Key("bench-raw-" + randHex(4))
	client := func(params string) *fencelock.Client {
		c, err := fencelock.Open(ctx, url+params)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	strict, fast := client(""), client("&fence_flush=false")
	defer strict.Close()
	defer fast.Close()
	name := "bench-" + randHex(4)
	o := opts(30*time.Second, false)
	fl := func(c *fencelock.Client) func() error {
		return func() error {
			l, err := c.TryAcquire(ctx, name, o)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}
	}
	variants := []struct {
		name string
		op   func() error
		lat  []time.Duration
	}{
		{name: "raw-tx", op: func() error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			var ok bool
			if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", key).Scan(&ok); err != nil || !ok {
				_ = tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx)
		}},
		{name: "raw-batched", op: func() error {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer c.Release()
			var bt pgx.Batch
			bt.Queue("BEGIN")
			bt.Queue("SELECT pg_try_advisory_xact_lock($1)", key)
			if err := c.SendBatch(ctx, &bt).Close(); err != nil {
				return err
			}
			_, err = c.Exec(ctx, "COMMIT")
			return err
		}},
		{name: "fencelock", op: fl(strict)},
		{name: "fencelock-no-fence-flush", op: fl(fast)},
	}
	if flushed {
		variants = append(variants, struct {
			name string
			op   func() error
			lat  []time.Duration
		}{name: "flushed-commit", op: func() error {
			_, err := pool.Exec(ctx, "SELECT pg_logical_emit_message(true, 'fencelock-bench', '')")
			return err
		}})
	}
	i := 0
	for b.Loop() {
		for j := range variants {
			v := &variants[(i+j)%len(variants)]
			s := time.Now()
			if err := v.op(); err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
			v.lat = append(v.lat, time.Since(s))
		}
		i++
	}
	p50 := map[string]float64{}
	for _, v := range variants {
		slices.Sort(v.lat)
		p50[v.name] = float64(v.lat[len(v.lat)/2].Nanoseconds()) / 1e3
		b.ReportMetric(p50[v.name], v.name+"-p50-µs")
		b.ReportMetric(float64(v.lat[len(v.lat)*99/100].Nanoseconds())/1e3, v.name+"-p99-µs")
	}
	b.ReportMetric(p50["fencelock"]/p50["raw-tx"], "fencelock/raw-tx")
	b.ReportMetric(p50["fencelock-no-fence-flush"]/p50["raw-tx"], "no-flush/raw-tx")
	if flushed {
		b.ReportMetric(p50["fencelock"]/(p50["raw-tx"]+p50["flushed-commit"]), "fencelock/(raw-tx+flush)")
	}
}

// BenchmarkHandOff measures the time from a holder's Release call to the
// return of a blocked Acquire queued in the server (confirmed in pg_locks
// before the release, no sleeps), against the same for raw pgx sessions
// (a COMMIT and a waiter in pg_advisory_xact_lock), bare ("raw-pgx") and
// with a fence, a transaction ID taken by both ("raw-fence-sql": the
// floor of a fenced hand-off).
//
//	go test -run '^$' -bench HandOff -benchtime 300x ./backends/pgadvisory/
func BenchmarkHandOff(b *testing.B) {
	ctx := b.Context()
	url := testserver.SharedPostgres(b).URL()
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	queued := func(key int64) {
		for {
			var n int
			err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
				AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND NOT granted`,
				int64(uint64(key)>>32), int64(uint32(key))).Scan(&n)
			if err != nil {
				b.Fatal(err)
			}
			if n > 0 {
				return
			}
		}
	}
	for _, v := range []struct{ name, params string }{
		{"fencelock", ""},
		{"fencelock-no-fence-flush", "&fence_flush=false"},
	} {
		b.Run(v.name, func(b *testing.B) {
			holder, err := fencelock.Open(ctx, url+v.params)
			if err != nil {
				b.Fatal(err)
			}
			defer holder.Close()
			waiter, err := fencelock.Open(ctx, url+v.params)
			if err != nil {
				b.Fatal(err)
			}
			defer waiter.Close()
			name := "handoff-" + randHex(4)
			o := opts(30*time.Second, false)
			lat := make([]time.Duration, 0, 1024)
			for b.Loop() {
				l, err := holder.Acquire(ctx, name, o)
				if err != nil {
					b.Fatal(err)
				}
				got := acquireAsync(ctx, waiter, name, o)
				queued(pgadvisory.Key(name))
				released := time.Now()
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
				r := <-got
				if r.err != nil {
					b.Fatal(r.err)
				}
				lat = append(lat, r.at.Sub(released))
				if err := r.l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			reportLatencies(b, lat)
		})
	}
	// raw runs the raw sessions' hand-off: the holder's transaction takes
	// the lock with holdSQL, the waiter sends BEGIN and waitSQL (%d: the
	// key) in one simple query.
	raw := func(b *testing.B, holdSQL, waitSQL string) {
		key := pgadvisory.Key("handoff-raw-" + randHex(4))
		hc, err := pgx.Connect(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		defer hc.Close(context.Background())
		wc, err := pgx.Connect(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		defer wc.Close(context.Background())
		lat := make([]time.Duration, 0, 1024)
		for b.Loop() {
			tx, err := hc.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(ctx, holdSQL, key); err != nil {
				b.Fatal(err)
			}
			got := make(chan time.Time, 1)
			go func() {
				_, err := wc.Exec(ctx, "BEGIN; "+fmt.Sprintf(waitSQL, key))
				if err != nil {
					b.Error(err)
				}
				got <- time.Now()
			}()
			queued(key)
			released := time.Now()
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, (<-got).Sub(released))
			if _, err := wc.Exec(ctx, "COMMIT"); err != nil {
				b.Fatal(err)
			}
		}
		reportLatencies(b, lat)
	}
	b.Run("raw-pgx", func(b *testing.B) {
		raw(b, "SELECT pg_advisory_xact_lock($1)", "SELECT pg_advisory_xact_lock(%d)")
	})
	// The bare fenced hand-off, fencelock's floor: both transactions take
	// a transaction ID (the fence), so the holder's COMMIT writes a commit
	// record before it lets the lock go.
	b.Run("raw-fence-sql", func(b *testing.B) {
		raw(b, "SELECT pg_advisory_xact_lock($1), pg_current_xact_id()",
			"SELECT pg_current_xact_id() FROM (SELECT pg_advisory_xact_lock(%d) OFFSET 0) AS w")
	})
}

// BenchmarkContended runs 8 clients on one name, each looping Acquire,
// Release, in chunks of 500 ms per variant, interleaved round by round so
// that load from elsewhere on the machine hits the variants alike: raw pgx
// as benchpeers runs it (pgxpool; Begin; SELECT pg_advisory_xact_lock;
// Commit), raw pgconn with BEGIN and the lock and its fence in one simple
// query ("raw-fence-sql", COMMIT to release), and fencelock with
// and without the fence flush, on a server with fsync on. Each reports its
// median grants/s over the rounds, the worst wait, and this process's CPU
// per grant. CONTENDED_VARIANTS=a,b runs only those.
//
//	go test -run '^$' -bench Contended -benchtime 6x ./backends/pgadvisory/
func BenchmarkContended(b *testing.B) {
	p := testserver.StartPostgresProcess(b, "-c", "fsync=on", "-c", "full_page_writes=on", "-c", "synchronous_commit=on")
	ctx := b.Context()
	url := p.URL()
	const workers = 8
	type worker struct {
		wait    func(context.Context) (func(context.Context) error, error)
		closeFn func()
	}
	rawPool := func(name string) []worker {
		key := pgadvisory.Key(name)
		ws := make([]worker, workers)
		for i := range ws {
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			ws[i] = worker{closeFn: pool.Close, wait: func(ctx context.Context) (func(context.Context) error, error) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return nil, err
				}
				if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
					_ = tx.Rollback(context.WithoutCancel(ctx))
					return nil, err
				}
				return tx.Commit, nil
			}}
		}
		return ws
	}
	rawFence := func(name string) []worker {
		sql := "BEGIN; SELECT pg_current_xact_id()::text FROM (SELECT pg_advisory_xact_lock(" + strconv.FormatInt(pgadvisory.Key(name), 10) + ") OFFSET 0) AS w"
		ws := make([]worker, workers)
		for i := range ws {
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			pg := c.PgConn()
			ws[i] = worker{closeFn: func() { _ = c.Close(context.Background()) }, wait: func(ctx context.Context) (func(context.Context) error, error) {
				if _, err := pg.Exec(ctx, sql).ReadAll(); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { return pg.Exec(ctx, "COMMIT").Close() }, nil
			}}
		}
		return ws
	}
	fl := func(params string) func(name string) []worker {
		return func(name string) []worker {
			o := opts(30*time.Second, false)
			ws := make([]worker, workers)
			for i := range ws {
				c, err := fencelock.Open(ctx, url+params)
				if err != nil {
					b.Fatal(err)
				}
				ws[i] = worker{closeFn: func() { _ = c.Close() }, wait: func(ctx context.Context) (func(context.Context) error, error) {
					l, err := c.Acquire(ctx, name, o)
					if err != nil {
						return nil, err
					}
					return l.Release, nil
				}}
			}
			return ws
		}
	}
	type variant struct {
		name string
		open func(name string) []worker
		ws   []worker
		rate []float64
		cpu  []float64
		wst  time.Duration
	}
	variants := []variant{
		{name: "raw-pgx", open: rawPool},
		{name: "raw-fence-sql", open: rawFence},
		{name: "fencelock-noflush", open: fl("&fence_flush=false")},
		{name: "fencelock-strict", open: fl("")},
	}
	if only := os.Getenv("CONTENDED_VARIANTS"); only != "" {
		variants = slices.DeleteFunc(variants, func(v variant) bool {
			return !slices.Contains(strings.Split(only, ","), v.name)
		})
	}
	for i := range variants {
		variants[i].ws = variants[i].open("contended-" + randHex(4))
		defer func() {
			for _, w := range variants[i].ws {
				w.closeFn()
			}
		}()
	}
	chunk := func(ws []worker) (grants int, worst time.Duration, cpu time.Duration) {
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		var mu sync.Mutex
		var wg sync.WaitGroup
		cpu0 := testhelp.ProcessCPU()
		for _, w := range ws {
			wg.Go(func() {
				n, my := 0, time.Duration(0)
				for rctx.Err() == nil {
					t0 := time.Now()
					// Not cancelled at the end of the chunk (a cancelled
					// pgconn wait breaks its connection): every worker
					// releases, so the last waits are granted.
					u, err := w.wait(ctx)
					my = max(my, time.Since(t0))
					if err != nil {
						b.Error(err)
						break
					}
					n++
					if err := u(context.WithoutCancel(ctx)); err != nil {
						b.Error(err)
						break
					}
				}
				mu.Lock()
				grants, worst = grants+n, max(worst, my)
				mu.Unlock()
			})
		}
		wg.Wait()
		return grants, worst, testhelp.ProcessCPU() - cpu0
	}
	i := 0
	for b.Loop() {
		for j := range variants {
			v := &variants[(i+j)%len(variants)]
			n, worst, cpu := chunk(v.ws)
			v.rate = append(v.rate, float64(n)/0.5)
			v.cpu = append(v.cpu, float64(cpu.Microseconds())/float64(max(n, 1)))
			v.wst = max(v.wst, worst)
		}
		i++
	}
	med := func(x []float64) float64 { x = slices.Clone(x); slices.Sort(x); return x[len(x)/2] }
	for _, v := range variants {
		b.ReportMetric(med(v.rate), v.name+"-grants/s")
		b.ReportMetric(med(v.cpu), v.name+"-cpu-µs/grant")
		b.ReportMetric(float64(v.wst.Microseconds())/1e3, v.name+"-worst-ms")
	}
}

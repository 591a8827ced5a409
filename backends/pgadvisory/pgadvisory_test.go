package pgadvisory_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

func TestMain(m *testing.M) {
	// The process-freeze check and the torture's child-process worker
	// re-execute this binary: serve as the child before any test starts
	// a server.
	conformance.MaybeRunChild()
	testserver.Main(m)
}

// harness opens every client by URL on one server, each with its own pool
// and a unique application_name, which KillSession uses to find the
// client's sessions.
type harness struct {
	url   string
	admin *pgxpool.Pool
}

func newHarness(params string) conformance.HarnessMaker {
	return func(ctx context.Context, t testing.TB) (conformance.Harness, error) {
		pg := testserver.SharedPostgres(t)
		admin, err := pgxpool.New(ctx, pg.URL())
		if err != nil {
			return nil, err
		}
		u := pg.URL()
		if params != "" {
			u += "&" + params
		}
		return &harness{url: u, admin: admin}, nil
	}
}

func (h *harness) MakeClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	u := testserver.PostgresDSNWith(h.url, "application_name", "fencelock-test-"+randHex(6))
	return fencelock.DefaultURLMux().Open(ctx, u, opts)
}

func (h *harness) URL() string { return h.url }
func (h *harness) Close()      { h.admin.Close() }

// Expire terminates the session holding the lock: a server-side loss.
func (h *harness) Expire(ctx context.Context, key string) error {
	n, err := terminateHolder(ctx, h.admin, pgadvisory.Key(key))
	if err == nil && n == 0 {
		err = errors.New("no session holds the lock")
	}
	return err
}

// KillSession terminates every session of the client's pool (and its fence
// flush connection), found by application_name.
func (h *harness) KillSession(ctx context.Context, c *fencelock.Client) error {
	var pool *pgxpool.Pool
	if !c.As(&pool) {
		return errors.New("not a pgadvisory client")
	}
	app := pool.Config().ConnConfig.RuntimeParams["application_name"]
	_, err := h.admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
	return err
}

// terminateHolder terminates the session holding advisory lock key, waits
// until it has exited (pg_terminate_backend only signals it; the lock is
// freed when it exits), and returns how many it terminated (0 or 1). A
// bigint advisory lock shows in pg_locks as classid = high 32 bits,
// objid = low 32 bits, objsubid = 1.
func terminateHolder(ctx context.Context, db *pgxpool.Pool, key int64) (int, error) {
	pid, err := holderPID(ctx, db, key)
	if err != nil || pid == 0 {
		return 0, err
	}
	if _, err := db.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var alive bool
		if err := db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive); err != nil {
			return 1, err
		}
		if !alive {
			return 1, nil
		}
		if time.Now().After(deadline) {
			return 1, errors.New("terminated session still running after 10s")
		}
	}
}

// holderPID returns the backend PID holding advisory lock key, or 0.
func holderPID(ctx context.Context, db *pgxpool.Pool, key int64) (int32, error) {
	hi, lo := int64(uint64(key)>>32), int64(uint32(key))
	var pid int32
	err := db.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND granted`, hi, lo).Scan(&pid)
	return pid, err
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func TestConformance(t *testing.T) { conformance.RunConformanceTests(t, newHarness("")) }

// TestConformanceNoFenceFlush runs the suite with fence_flush=false, which
// declares FenceBestEffort (the suite's checks are the same).
func TestConformanceNoFenceFlush(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	conformance.RunConformanceTests(t, newHarness("fence_flush=false"))
}

// TestConformanceSimpleProtocol runs the suite on a pool whose exec mode
// is not cache_statement (as behind PgBouncer before 1.21): the grants go
// as one simple query, not as prepared statements (see query.go), with the
// fence flush off and on.
func TestConformanceSimpleProtocol(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Run("noflush", func(t *testing.T) {
		conformance.RunConformanceTests(t, newHarness("default_query_exec_mode=simple_protocol&fence_flush=false"))
	})
	t.Run("strict", func(t *testing.T) {
		conformance.RunConformanceTests(t, newHarness("default_query_exec_mode=simple_protocol"))
	})
}

func BenchmarkConformance(b *testing.B) { conformance.RunBenchmarks(b, newHarness("")) }

func BenchmarkConformanceNoFenceFlush(b *testing.B) {
	conformance.RunBenchmarks(b, newHarness("fence_flush=false"))
}

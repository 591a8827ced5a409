package pgadvisory_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
)

// TestWaitTakesFenceAfterGrant: a blocking Acquire takes its fence (a
// transaction ID) only once the server granted its lock, in either mode:
// while it waits in the queue its session has no transaction ID, and its
// fence is larger than an ID assigned after it queued and before the
// holder released. (The lock and the fence are one statement: if the
// fence were read first, both checks fail.)
func TestWaitTakesFenceAfterGrant(t *testing.T) {
	for _, mode := range []struct{ name, params string }{{"strict", ""}, {"noflush", "fence_flush=false"}} {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			a, b := e.client(mode.params), e.client(mode.params)
			name := e.name()
			key := pgadvisory.Key(name)
			l1, err := a.TryAcquire(e.ctx, name, opts(30*time.Second, false))
			if err != nil {
				t.Fatal(err)
			}
			got := acquireAsync(e.ctx, b, name, opts(30*time.Second, false))
			e.waitFor(5*time.Second, "waiter queued", func() (bool, error) { n, err := e.waiters(key); return n == 1, err })
			var withXID int
			if err := e.admin.QueryRow(e.ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
				WHERE l.locktype = 'advisory' AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid
				AND NOT l.granted AND a.backend_xid IS NOT NULL`,
				int64(uint64(key)>>32), int64(uint32(key))).Scan(&withXID); err != nil {
				t.Fatal(err)
			}
			if withXID != 0 {
				t.Fatal("the waiting session already has a transaction ID: its fence would be taken before the grant")
			}
			var between int64
			if err := e.admin.QueryRow(e.ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&between); err != nil {
				t.Fatal(err)
			}
			if err := l1.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.l.Release(e.ctx)
			if f := r.l.Fence(); f <= fencelock.Fence(between) {
				t.Fatalf("waiter's fence %d ≤ %d, an ID assigned while it waited", f, between)
			}
		})
	}
}

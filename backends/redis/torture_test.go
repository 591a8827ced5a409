package redis_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTortureByURL: the short CI torture by URL (random operations under
// a seeded fault schedule, the history checked; see conformance.Torture).
// The test owns the server, so the nemesis also pauses it (SIGSTOP) and
// kills and restarts it empty.
func TestTortureByURL(t *testing.T) {
	r := testserver.StartRedis(t)
	o := conformance.TortureOptions{}
	if r.Proc != nil {
		o.RestartLosesLocks = true // no persistence: it restarts empty
		o.Pause, o.Resume = r.Proc.Pause, r.Proc.Resume
		o.Restart = func(ctx context.Context) error {
			if err := r.Proc.Kill(); err != nil {
				return fmt.Errorf("kill redis-server: %w", err)
			}
			return r.Proc.Start(ctx)
		}
	}
	conformance.CITorture(t, conformance.URLHarness(r.URL()), o)
}

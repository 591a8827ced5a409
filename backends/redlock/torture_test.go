package redlock_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTortureByURL: the short CI torture by URL on 5 primaries; the
// nemesis cuts the proxied client from a majority of them, and, since
// the test owns the primaries, pauses one (SIGSTOP) and kills and
// restarts one empty, a different one each time.
func TestTortureByURL(t *testing.T) {
	if u := os.Getenv("REDLOCK_URL"); u != "" {
		conformance.CITorture(t, conformance.URLHarness(u), conformance.TortureOptions{})
		return
	}
	m := testserver.StartRedisNodes(t, 5, nil)
	var restarts, pauses atomic.Int32
	var paused int
	o := conformance.TortureOptions{
		RestartLosesLocks: true, // a primary without persistence restarts empty
		Restart: func(ctx context.Context) error {
			return m.Restart(ctx, int(restarts.Add(1))%len(m.Nodes))
		},
		// The nemesis applies one fault at a time: Resume follows its Pause.
		Pause: func() error {
			paused = int(pauses.Add(1)) % len(m.Nodes)
			return m.Pause(paused)
		},
		Resume: func() error { return m.Resume(paused) },
	}
	conformance.CITorture(t, conformance.URLHarness(m.URL()), o)
}

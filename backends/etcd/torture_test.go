package etcd

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTortureByURL: the short CI torture by URL on a 3-member cluster;
// the test owns the members, so the nemesis also pauses the leader
// (SIGSTOP) and kills and restarts it.
func TestTortureByURL(t *testing.T) {
	c := testserver.StartEtcdCluster(t, 3)
	o := conformance.TortureOptions{}
	if os.Getenv("ETCD_URL") == "" {
		var paused *testserver.EtcdMember
		leader := func() (*testserver.EtcdMember, error) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			m, err := c.Leader(ctx)
			if err != nil {
				return nil, fmt.Errorf("find the leader: %w", err)
			}
			return m, nil
		}
		o.Restart = func(ctx context.Context) error {
			m, err := leader()
			if err != nil {
				return err
			}
			return m.Restart(ctx)
		}
		// The nemesis applies one fault at a time: Resume follows its Pause.
		o.Pause = func() error {
			m, err := leader()
			if err != nil {
				return err
			}
			paused = m
			return m.Pause()
		}
		o.Resume = func() error { return paused.Resume() }
	}
	conformance.CITorture(t, conformance.URLHarness(c.URL("torture")), o)
}

package dynamodb_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTortureByURL: the short CI torture by URL on dynalite. The test
// owns the server, so the nemesis also pauses it (SIGSTOP) and kills and
// restarts it; dynalite keeps its tables in memory, so it restarts empty
// and the restart makes the lock table again (as an operator restoring
// the table would), every item and fence counter gone.
func TestTortureByURL(t *testing.T) {
	d := testserver.StartDynalite(t)
	o := conformance.TortureOptions{}
	if d.Proc != nil {
		o.RestartLosesLocks = true
		o.Pause, o.Resume = d.Proc.Pause, d.Proc.Resume
		o.Restart = func(ctx context.Context) error {
			if err := d.Proc.Kill(); err != nil {
				return fmt.Errorf("kill dynalite: %w", err)
			}
			if err := d.Proc.Start(ctx); err != nil {
				return err
			}
			c, err := fencelock.DefaultURLMux().Open(ctx, d.URL(), nil) // create_table=true
			if err != nil {
				return fmt.Errorf("make the table again: %w", err)
			}
			return c.Close()
		}
	}
	conformance.CITorture(t, conformance.URLHarness(d.URL()), o)
}

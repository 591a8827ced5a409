package conformance

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RunTorture runs Torture on a harness newHarness makes, once per seed
// (0: a random seed, printed), each for o.Duration, and fails t with the
// report (each violation's window and the seed) on any violation. With
// FENCELOCK_TORTURE_DIR set, each run's history (JSONL) and timeline
// (SVG) are written there; otherwise only a failing run's, to t's temp
// directory, named in the log.
//
// One worker's Client runs in a child process where it can (Linux, a
// harness with a URL): this binary re-executed to run t's top-level test,
// which reaches RunTorture first and serves as the child there.
func RunTorture(t *testing.T, newHarness HarnessMaker, o TortureOptions, seeds ...uint64) {
	if runFreezeChildIfRequested() {
		return
	}
	if o.ChildArgs == nil {
		top, _, _ := strings.Cut(t.Name(), "/")
		o.ChildArgs = []string{"-test.run=^" + top + "$", "-test.count=1"}
	}
	if len(seeds) == 0 {
		seeds = []uint64{0}
	}
	for _, seed := range seeds {
		if seed == 0 {
			seed = RandomSeed()
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			h, err := newHarness(t.Context(), t)
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
			defer h.Close()
			o := o
			o.Seed = seed
			var out bytes.Buffer
			o.Out = &out
			res, err := Torture(t.Context(), h, o)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			var rep strings.Builder
			top, _, _ := strings.Cut(t.Name(), "/")
			res.WriteReport(&rep, fmt.Sprintf("FENCELOCK_TORTURE_SEED=%d go test -race -run '^%s$' (in this package)", seed, top))
			t.Logf("%s%s", out.String(), rep.String())
			dir := os.Getenv("FENCELOCK_TORTURE_DIR")
			if dir == "" && len(res.Violations) > 0 {
				dir = t.TempDir()
			}
			if dir != "" {
				base := filepath.Join(dir, fmt.Sprintf("torture-%s-%d", res.Meta.Backend, seed))
				if err := res.WriteFiles(base+".jsonl", base+".svg"); err != nil {
					t.Errorf("%v", err)
				}
				t.Logf("history: %s.jsonl, timeline: %s.svg", base, base)
			}
			if len(res.Violations) > 0 {
				t.Errorf("torture found %d violations (seed %d)", len(res.Violations), seed)
			}
		})
	}
}

// CITorture is the short torture each backend's test runs in CI: the
// random phase lasts FENCELOCK_TORTURE_DURATION (default 12s), on seed
// 24 and a random seed (printed), or on FENCELOCK_TORTURE_SEED alone.
func CITorture(t *testing.T, newHarness HarnessMaker, o TortureOptions) {
	o.Duration = 12 * time.Second
	if v := os.Getenv("FENCELOCK_TORTURE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("FENCELOCK_TORTURE_DURATION=%q: want a positive duration", v)
		}
		o.Duration = d
	}
	seeds := []uint64{24, 0}
	if v := os.Getenv("FENCELOCK_TORTURE_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil || s == 0 {
			t.Fatalf("FENCELOCK_TORTURE_SEED=%q: want a positive integer", v)
		}
		seeds = []uint64{s}
	}
	RunTorture(t, newHarness, o, seeds...)
}

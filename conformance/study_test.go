package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/guard"
)

// The study protocol redoes rejected writes, so with fencing every section
// lands (lost 0, final = sections), and without it overlaps lose updates.
func TestStudyProtocol(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	var ls []fencelock.Locker
	for range 4 {
		c, err := memory.New(s, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ls = append(ls, c)
	}
	cfg := conformance.StudyConfig{Name: "study", Sections: 80, Workers: 4, StallRate: 0.1,
		TTL: 40 * time.Millisecond, Work: 20 * time.Millisecond, StallMin: 30 * time.Millisecond, StallMax: 90 * time.Millisecond}
	for _, m := range conformance.Modes() {
		var res guard.Counter
		r, err := conformance.Study(ctx, ls, &res, m, cfg)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		t.Logf("%-11s stalled %d rejected %d final %d lost %d (%v)", m, r.Stalled, r.Rejected, r.Final, r.Lost, r.Elapsed.Round(time.Millisecond))
		if r.Stalled != 8 {
			t.Errorf("%s: %d sections stalled, want 8 (10%% of 80)", m, r.Stalled)
		}
		if r.Lost != r.Sections-int(r.Final) {
			t.Errorf("%s: lost %d != sections %d − final %d", m, r.Lost, r.Sections, r.Final)
		}
		switch m {
		case conformance.NoFencing:
			if r.Lost == 0 || r.Rejected != 0 {
				t.Errorf("no fencing: lost %d, rejected %d; want losses (the experiment has teeth) and no rejections", r.Lost, r.Rejected)
			}
		case conformance.ClaimFirst:
			if r.Lost != 0 || r.Rejected == 0 {
				t.Errorf("claim-first: lost %d, rejected %d; want 0 lost and the stale writes rejected", r.Lost, r.Rejected)
			}
		}
	}
}

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want conformance.Spread
		str  string
	}{
		{nil, conformance.Spread{}, "0"},
		{[]int{5}, conformance.Spread{5, 5, 5}, "5"},
		{[]int{44, 19, 42, 30, 43}, conformance.Spread{42, 19, 44}, "42 (19–44)"},
		{[]int{4, 1, 3, 2}, conformance.Spread{2, 1, 4}, "2 (1–4)"},
	} {
		got := conformance.SpreadOf(tc.in)
		if got != tc.want || got.String() != tc.str {
			t.Errorf("SpreadOf(%v) = %+v %q, want %+v %q", tc.in, got, got, tc.want, tc.str)
		}
	}
}

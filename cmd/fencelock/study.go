package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/guard"
)

// studyProfiles are lostupdates' --profile values that follow the study's
// published protocols exactly (see conformance.StudyProfile).
var studyProfiles = map[string]struct {
	cfg   conformance.StudyConfig
	rates []float64
}{
	"study":   {conformance.StudyProfile(), []float64{0.001, 0.01, 0.05}},
	"overlap": {conformance.OverlapProfile(), []float64{0.05}},
}

// published are the study's medians (ranges) per profile, stall rate and
// mode, printed next to ours: lost / rejected.
var published = map[string]map[float64][3]string{
	"study": {
		0.001: {"42 (19–44) / 0", "0 / 9", "0 / 10"},
		0.01:  {"310 (226–385) / 0", "0 / 106", "0 / 105"},
		0.05:  {"1,650 (1,447–1,740) / 0", "≤ 1 / 502", "0 / 531"},
	},
	"overlap": {0.05: {"92 / 0", "50 / –", "0 / –"}},
}

// studyRun is one profile's runs on one store: per stall rate and mode,
// the lost and rejected counts of each run.
type studyRun struct {
	profile  string
	cfg      conformance.StudyConfig
	runs     int
	resource string // what the counter lived in
	ttl      time.Duration
	rates    []float64
	lost     map[float64]map[conformance.Mode][]int
	rej      map[float64]map[conformance.Mode][]int
}

// runStudy runs profile's protocol runs times per stall rate and mode on
// lks, each run on a fresh resource from newRes, reporting progress to
// stderr. sections overrides the profile's count when positive.
func runStudy(ctx context.Context, lks []fencelock.Locker, newRes func(ctx context.Context, id string) (guard.Resource, error), profile string, runs, sections int, name string) (*studyRun, error) {
	p, ok := studyProfiles[profile]
	if !ok {
		return nil, fmt.Errorf("unknown --profile %q: want quick, study or overlap", profile)
	}
	cfg := p.cfg
	if sections > 0 {
		cfg.Sections = sections
	}
	return runStudyConfig(ctx, lks, newRes, profile, cfg, p.rates, runs, name)
}

// runStudyConfig runs the protocol cfg (published as profile) runs times
// per stall rate and mode.
func runStudyConfig(ctx context.Context, lks []fencelock.Locker, newRes func(ctx context.Context, id string) (guard.Resource, error), profile string, cfg conformance.StudyConfig, rates []float64, runs int, name string) (*studyRun, error) {
	if runs <= 0 {
		return nil, fmt.Errorf("--runs must be positive")
	}
	sr := &studyRun{profile: profile, cfg: cfg, runs: runs, ttl: cfg.TTL, rates: rates, lost: map[float64]map[conformance.Mode][]int{}, rej: map[float64]map[conformance.Mode][]int{}}
	for ri, rate := range rates {
		sr.lost[rate], sr.rej[rate] = map[conformance.Mode][]int{}, map[conformance.Mode][]int{}
		for run := range runs {
			for _, m := range conformance.Modes() {
				res, err := newRes(ctx, fmt.Sprintf("%s-%d-%d-%d", profile, ri, run, m))
				if err != nil {
					return nil, err
				}
				c := cfg
				c.StallRate = rate
				c.Name = fmt.Sprintf("%s-%s-%d-%d-%d", name, profile, ri, run, m)
				start := time.Now()
				last := start
				c.Progress = func(done, total int) {
					if time.Since(last) > 5*time.Second {
						last = time.Now()
						fmt.Fprintf(os.Stderr, "  ... %s %s run %d/%d %s: %d/%d sections, %v\n", profile, fmtRate(rate), run+1, runs, m, done, total, time.Since(start).Round(time.Second))
					}
				}
				r, err := conformance.Study(ctx, lks, res, m, c)
				if err != nil {
					return nil, err
				}
				sr.lost[rate][m] = append(sr.lost[rate][m], r.Lost)
				sr.rej[rate][m] = append(sr.rej[rate][m], r.Rejected)
			}
		}
	}
	return sr, nil
}

// table renders the runs as markdown, ours next to the study's.
func (sr *studyRun) table(backend string) string {
	var b strings.Builder
	for _, rate := range sr.rates {
		pub := published[sr.profile][rate]
		for i, m := range conformance.Modes() {
			fmt.Fprintf(&b, "| %s | %s | %s | %s / %s | %s |\n", backend, fmtRate(rate), m,
				conformance.SpreadOf(sr.lost[rate][m]), conformance.SpreadOf(sr.rej[rate][m]), pub[i])
		}
	}
	return b.String()
}

const studyHeader = "| backend | stalls | mode | ours: lost / rejected, median (range) | study: lost / rejected |\n|---|---|---|---|---|\n"

// runLostUpdatesProfile is `lostupdates --profile study|overlap`: the
// study's protocol on the store, a markdown table of ours next to its.
// --sections and --workers override the profile only when given.
func runLostUpdatesProfile(ctx context.Context, sf *storeFlags, profile string, runs, workers, sections int, resource string, fs *flag.FlagSet) error {
	p, ok := studyProfiles[profile]
	if !ok {
		return fmt.Errorf("unknown --profile %q: want quick, study or overlap", profile)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, f := range []string{"stall", "ttl"} {
		if set[f] {
			fmt.Fprintf(os.Stderr, "fencelock lostupdates: --%s does not apply to --profile %s, whose protocol fixes it (TTL %v, stalls of %v–%v); use --profile quick to choose it\n", f, profile, p.cfg.TTL, p.cfg.StallMin, p.cfg.StallMax)
			return usageError{fmt.Errorf("--%s with --profile %s", f, profile)}
		}
	}
	if !set["workers"] {
		workers = p.cfg.Workers
	}
	if !set["sections"] {
		sections = 0
	}
	url, cleanup, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cs, closeAll, err := openClients(ctx, url, "study", workers)
	if err != nil {
		return err
	}
	defer closeAll()
	if min := cs[0].Capabilities().MinTTL; min > p.cfg.TTL {
		return fmt.Errorf("the %s protocol uses a %v TTL; the %s backend's minimum is %v", profile, p.cfg.TTL, cs[0].Capabilities().Backend, min)
	}
	newRes, closeRes, err := openResource(ctx, resource, url)
	if err != nil {
		return err
	}
	defer closeRes()
	n := p.cfg.Sections
	if sections > 0 {
		n = sections
	}
	fmt.Printf("lost-update study protocol %q on %s (%s): %d workers, %d sections, TTL %v, work %v, stalls %v–%v, %d run(s), resource %s\n\n",
		profile, fencelock.RedactURL(url), cs[0].Capabilities().Backend, workers, n, p.cfg.TTL, p.cfg.Work, p.cfg.StallMin, p.cfg.StallMax, runs, resource)
	sr, err := runStudy(ctx, lockers(cs), newRes, profile, runs, sections, "lostupdates")
	if err != nil {
		return err
	}
	fmt.Print(studyHeader + sr.table(cs[0].Capabilities().Backend))
	fmt.Println("\nlost = sections − final value (rejected writes are redone until they land); the study's numbers used a Postgres row.")
	return nil
}

package peers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// Config configures Run.
type Config struct {
	Rounds int
	Counts Counts
	Quick  bool
	// ChunkTimeout bounds one implementation's chunk in one round.
	ChunkTimeout time.Duration
	// Log receives progress lines (nil: none).
	Log io.Writer
}

// FullConfig is the default run (about 8 minutes on 2 cores).
func FullConfig() Config {
	return Config{Rounds: 5, ChunkTimeout: 2 * time.Minute, Counts: Counts{
		Uncontended: 300, Handoffs: 20, Drains: 3, Workers: 8,
		Contention: 2 * time.Second, Settle: 30 * time.Millisecond, Floor: 300,
	}}
}

// QuickConfig is the -quick run (1–2 minutes).
func QuickConfig() Config {
	return Config{Rounds: 2, Quick: true, ChunkTimeout: time.Minute, Counts: Counts{
		Uncontended: 100, Handoffs: 8, Drains: 1, Workers: 8,
		Contention: 700 * time.Millisecond, Settle: 30 * time.Millisecond, Floor: 100,
	}}
}

// Run measures every implementation and floor of env in cfg.Rounds
// interleaved rounds: each round runs every implementation's chunk in
// turn, then every floor, so drift in machine load hits all alike.
func Run(ctx context.Context, env *Env, cfg Config) *Result {
	start := time.Now()
	host, _ := os.Hostname()
	res := &Result{
		Schema: SchemaVersion, Date: start.UTC().Format(time.RFC3339), GoVersion: runtime.Version(),
		Machine: Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Hostname: host, LoadAvgStart: loadAvg()},
		Quick:   cfg.Quick, Rounds: cfg.Rounds, Counts: cfg.Counts, Servers: env.Servers,
	}
	versions := moduleVersions()
	runs := openImpls(ctx, env, cfg)
	defer closeImpls(runs)
	floors := openFloors(ctx, env)
	defer closeFloors(floors)
	for round := 1; round <= cfg.Rounds; round++ {
		runRound(ctx, env, cfg, round, runs, floors)
	}
	for i, im := range env.Impls {
		res.Impls = append(res.Impls, ImplResult{
			ID: im.ID, Store: im.Store, Library: im.Library, Version: cmp.Or(versions[im.Library], "unknown (no build info)"),
			Fencelock: im.Library == fencelockModule, Notes: im.Notes,
			Metrics: aggregate(runs[i].samples), Errors: runs[i].errs,
		})
	}
	for i, f := range env.Floors {
		res.Floors = append(res.Floors, FloorResult{
			ID: f.ID, Store: f.Store, What: f.What,
			Metrics: aggregate(floors[i].samples), Errors: floors[i].errs,
		})
	}
	res.DurationS = time.Since(start).Seconds()
	return res
}

// logf writes a progress line to cfg.Log, if set.
func (cfg Config) logf(format string, a ...any) {
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, format+"\n", a...)
	}
}

// implRun is one implementation's clients and what its rounds measured.
type implRun struct {
	clients clients // Workers+1 when every open succeeded
	samples []sample
	errs    []string
}

// openImpls opens cfg.Counts.Workers+1 clients of each of env's
// implementations; an implementation that fails to open records why and
// is left out of the rounds.
func openImpls(ctx context.Context, env *Env, cfg Config) []*implRun {
	runs := make([]*implRun, len(env.Impls))
	for i, im := range env.Impls {
		r := &implRun{}
		runs[i] = r
		for range cfg.Counts.Workers + 1 {
			l, err := im.Open(ctx)
			if err != nil {
				r.errs = append(r.errs, "open: "+err.Error())
				break
			}
			r.clients = append(r.clients, l)
		}
	}
	return runs
}

func closeImpls(runs []*implRun) {
	for _, r := range runs {
		for _, l := range r.clients {
			_ = l.Close()
		}
	}
}

// floorRun is one floor's operation and what its rounds measured.
type floorRun struct {
	op      func(context.Context) error // nil: the open failed
	close   func()
	samples []sample
	errs    []string
}

// openFloors opens each of env's floors; one that fails to open records
// why and is left out of the rounds.
func openFloors(ctx context.Context, env *Env) []*floorRun {
	floors := make([]*floorRun, len(env.Floors))
	for i, f := range env.Floors {
		op, closeFn, err := f.Open(ctx)
		floors[i] = &floorRun{op: op, close: closeFn}
		if err != nil {
			floors[i].errs = append(floors[i].errs, "open: "+err.Error())
		}
	}
	return floors
}

func closeFloors(floors []*floorRun) {
	for _, f := range floors {
		if f.close != nil {
			f.close()
		}
	}
}

// runRound runs round number round: the uncontended and hand-off
// measures of every store's implementations side by side, then store by
// store each implementation's drain (in an order rotated per round, see
// chunkOrder) and the store's contention, its implementations taking
// turns (contendSideBySide), then every floor.
func runRound(ctx context.Context, env *Env, cfg Config, round int, runs []*implRun, floors []*floorRun) {
	side := sideBySide(ctx, env, cfg, round, runs)
	for _, idx := range chunkOrder(env, cfg, round, runs) {
		var live []int
		t0 := map[int]time.Time{}
		for _, i := range idx {
			if side[i] == nil {
				continue
			}
			t0[i] = time.Now()
			if err := drainChunk(ctx, runs[i].clients, keyBase(env.Impls[i].ID, round), cfg, side[i]); err != nil {
				runs[i].fail(cfg, round, env.Impls[i].ID, err)
				continue
			}
			live = append(live, i)
		}
		for j, err := range contendSideBySide(ctx, env, cfg, round, runs, live, side) {
			i := live[j]
			if err != nil {
				runs[i].fail(cfg, round, env.Impls[i].ID, fmt.Errorf("contention: %w", err))
				continue
			}
			s := side[i]
			runs[i].samples = append(runs[i].samples, s)
			cfg.logf("round %d %-30s %6.1fs  acq+rel p50 %.0fµs, hand-off p50 %.0fµs, %.0f/s contended",
				round, env.Impls[i].ID, time.Since(t0[i]).Seconds(), s[MUncontP50], s[MHandoffP50], s[MThroughput])
		}
	}
	for i, f := range floors {
		if f.op == nil {
			continue
		}
		s := sample{}
		if err := floor(ctx, f.op, cfg.Counts.Floor, s); err != nil {
			f.errs = append(f.errs, fmt.Sprintf("round %d: %v", round, err))
			continue
		}
		f.samples = append(f.samples, s)
		cfg.logf("round %d %-30s p50 %.0fµs", round, env.Floors[i].ID, s[MFloorP50])
	}
}

// fail records a round's error of this implementation.
func (r *implRun) fail(cfg Config, round int, id string, err error) {
	r.errs = append(r.errs, fmt.Sprintf("round %d: %v", round, err))
	cfg.logf("round %d %-30s ERROR %v", round, id, err)
}

// chunkOrder is round's order of each store's implementations: store by
// store, each store's implementations rotated by one place per round, so
// that none always goes first (after another store's contention, or on a
// server just started; on dynalite the first chunk measured slower).
func chunkOrder(env *Env, cfg Config, round int, runs []*implRun) [][]int {
	var order [][]int
	for _, idx := range runnableByStore(env, cfg, runs) {
		k := (round - 1) % len(idx)
		order = append(order, slices.Concat(idx[k:], idx[:k]))
	}
	return order
}

const fencelockModule = "github.com/fencelock/fencelock"

// keyBase names one chunk's keys: unique per implementation and round.
func keyBase(id string, round int) string {
	return fmt.Sprintf("peers-%s-r%d", strings.NewReplacer("/", "-", ".", "-").Replace(id), round)
}

// drainChunk runs one implementation's drain measure once, adding it to
// s (see sideBySide and contendSideBySide for the others).
func drainChunk(ctx context.Context, cs clients, key string, cfg Config, s sample) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.ChunkTimeout)
	defer cancel()
	c := cfg.Counts
	if err := drain(ctx, cs[0], cs[1:], key+"-d", c.Drains, c.Settle, s); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if ctx.Err() != nil {
		return errors.New("drain timed out")
	}
	return nil
}

// aggregate is the median, min and max of each metric over the samples.
func aggregate(samples []sample) map[string]Metric {
	m := map[string]Metric{}
	if len(samples) == 0 {
		return m
	}
	for k := range samples[0] {
		var v []float64
		for _, s := range samples {
			if x, ok := s[k]; ok {
				v = append(v, x)
			}
		}
		slices.Sort(v)
		med := v[len(v)/2]
		if len(v)%2 == 0 {
			med = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		m[k] = Metric{Median: med, Min: v[0], Max: v[len(v)-1]}
	}
	return m
}

// moduleVersions maps module path → version as built (test binaries
// carry no dependency list).
func moduleVersions() map[string]string {
	v := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	for _, d := range bi.Deps {
		v[d.Path] = d.Version
		if d.Replace != nil {
			v[d.Path] = d.Version + " => " + d.Replace.Path + " (this checkout)"
		}
	}
	if _, ok := v[fencelockModule]; !ok {
		v[fencelockModule] = "this checkout"
	}
	return v
}

// loadAvg is /proc/loadavg's first three fields, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

package peers

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Markdown writes res as side-by-side tables, one row per
// implementation grouped by store, then the floors and the notes. Each
// cell is the median over the rounds with the min–max spread in
// parentheses.
func Markdown(w io.Writer, res *Result) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	mode := "full"
	if res.Quick {
		mode = "quick"
	}
	p("# fencelock next to its peers (%s run)\n\n", mode)
	p("%s · %s · %s/%s, %d CPUs · %d interleaved rounds · %.0f s · `make bench-peers`\n\n",
		res.Date, res.GoVersion, res.Machine.OS, res.Machine.Arch, res.Machine.CPUs, res.Rounds, res.DurationS)
	if res.Machine.LoadAvgStart != "" {
		p("Load average at the start: %s. ", res.Machine.LoadAvgStart)
	}
	if res.Machine.Note != "" {
		p("%s", res.Machine.Note)
	}
	p("\n\n")
	p("Servers: ")
	first := true
	for _, s := range Stores() {
		if v, ok := res.Servers[s]; ok {
			if !first {
				p("; ")
			}
			p("%s: %s", s, v)
			first = false
		}
	}
	p(".\n\nCells: median over rounds (min–max). acq+rel: uncontended acquire+release on one client. hand-off: holder's release call → blocked waiter holds. A store's implementations take turns in both, every %d pairs and every %d hand-offs, so that drift lands on all alike. drain: release → all 8 waiters held once. contended: 8 clients on one key for %s per round, in %d turns, a store's implementations taking turns (first place rotating); only grants before a turn's end count, over the turns' lengths; worst wait: the longest wait for a grant (a wait a turn's end cut off counts until that end); cut-off return: the longest a cut-off wait took to return after the end (what cancelling a wait costs); sections: grants per worker, least–most (max/min); re-grab: grants to the worker that held the previous one; CPU/grant: CPU time per contended grant up to the turns' ends, of this process (all 8 clients) + of the server processes (median µs; the machine's cores are shared by both, so it bounds contended throughput: cores ÷ CPU per grant). ×: fencelock's median over the best peer's on the same store (acq+rel: lower is better; contended/s: higher is better).\n\n", uncontendedBatch, handoffBatch, res.Counts.Contention, contentionTurns)
	p("| implementation | acq+rel p50 µs | acq+rel p99 µs | allocs/op | hand-off p50 µs | hand-off p99 µs | 8 drained ms | contended /s | worst wait ms | cut-off return ms | sections min–max | re-grab %% | CPU/grant µs |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, store := range Stores() {
		for _, im := range res.Impls {
			if im.Store != store {
				continue
			}
			m := im.Metrics
			name := im.ID
			if im.Fencelock {
				name = "**" + name + "**"
			}
			if len(m) == 0 {
				p("| %s | failed: %s |||||||||||\n", name, strings.Join(im.Errors, "; "))
				continue
			}
			acq := cell(m[MUncontP50], 0)
			thr := cell(m[MThroughput], 0)
			if im.Fencelock {
				if r, ok := ratio(res, im, MUncontP50, false); ok {
					acq += fmt.Sprintf(" **%.2f×**", r)
				}
				if r, ok := ratio(res, im, MThroughput, true); ok {
					thr += fmt.Sprintf(" **%.2f×**", r)
				}
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f–%.0f (%.2f) | %s | %s |\n", name,
				acq, cell(m[MUncontP99], 0), cell(m[MAllocs], 0),
				cell(m[MHandoffP50], 0), cell(m[MHandoffP99], 0), cell(m[MDrain], 1),
				thr, cell(m[MWorstWait], 1), cell(m[MCutoffReturn], 1),
				m[MWorkerMin].Median, m[MWorkerMax].Median, m[MWorkerRatio].Median,
				cell(m[MRegrab], 1), cpuCell(m))
		}
	}
	p("\n| floor | what | p50 µs | p99 µs |\n|---|---|---|---|\n")
	for _, f := range res.Floors {
		p("| %s | %s | %s | %s |\n", f.ID, f.What, cell(f.Metrics[MFloorP50], 0), cell(f.Metrics[MFloorP99], 0))
	}
	p("\nHow each runs:\n\n")
	for _, im := range res.Impls {
		p("- %s: %s %s — %s\n", im.ID, im.Library, im.Version, im.Notes)
		for _, e := range im.Errors {
			p("  - error: %s\n", e)
		}
	}
	for _, f := range res.Floors {
		for _, e := range f.Errors {
			p("- %s error: %s\n", f.ID, e)
		}
	}
}

// cpuCell is "client + server" CPU µs per contended grant ("–" for what
// was not measured).
func cpuCell(m map[string]Metric) string {
	f := func(k string) string {
		if v, ok := m[k]; ok {
			return fmt.Sprintf("%.0f", v.Median)
		}
		return "–"
	}
	return f(MClientCPU) + " + " + f(MServerCPU)
}

// cell formats a metric as "median (min–max)" with prec decimals.
func cell(m Metric, prec int) string {
	return fmt.Sprintf("%.*f (%.*f–%.*f)", prec, m.Median, prec, m.Min, prec, m.Max)
}

// ratio is im's median of key over the best peer's on im's store: the
// lowest, or the highest when higherBetter.
func ratio(res *Result, im ImplResult, key string, higherBetter bool) (float64, bool) {
	best := math.NaN()
	for _, o := range res.Impls {
		if o.Store != im.Store || o.Fencelock {
			continue
		}
		v, ok := o.Metrics[key]
		if !ok || v.Median <= 0 {
			continue
		}
		if math.IsNaN(best) || (higherBetter && v.Median > best) || (!higherBetter && v.Median < best) {
			best = v.Median
		}
	}
	mine, ok := im.Metrics[key]
	if math.IsNaN(best) || !ok {
		return 0, false
	}
	return mine.Median / best, true
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/conformance"
)

// tortureRun is one backend's torture run in compare.
type tortureRun struct {
	ops        int
	faults     map[string]int // injected, by kind
	violations []conformance.Violation
	allowed    time.Duration // overlap the backend declares (BreakOverlap and its tolerance)
	elapsed    time.Duration
	replay     string
	err        error
}

// compareTorture runs the torture (tortureURL, as `fencelock torture`
// runs it) on tg's store for d with seed.
func compareTorture(ctx context.Context, tg target, d time.Duration, seed uint64) tortureRun {
	o := conformance.TortureOptions{Duration: d, Seed: seed, Workers: tortureWorkers, Names: tortureNames, TTL: tortureTTL, Out: io.Discard}
	scheme, _, _ := strings.Cut(tg.url, ":")
	replayURL := scheme + "://…"
	if scheme == "mem" {
		replayURL = tg.url
	}
	tr := tortureRun{replay: tortureReplay(replayURL, o)}
	res, err := tortureURL(ctx, tg.url, o)
	tr.err = err
	if res == nil {
		return tr
	}
	tr.ops, tr.violations, tr.allowed, tr.elapsed = res.Ops(), res.Violations, res.Meta.AllowedOverlap, res.Elapsed
	tr.faults = map[string]int{}
	for _, f := range res.History.Faults() {
		tr.faults[f.Kind]++
	}
	return tr
}

// countsByKind renders counts by kind: "3: 1 blackhole, 2 reset", or "0".
func countsByKind(m map[string]int) string {
	total := 0
	for _, n := range m {
		total += n
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%d: %s", total, kindList(m))
}

// kindList is "1 blackhole, 2 reset": each kind's count, kinds sorted.
func kindList(m map[string]int) string {
	kinds := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

// violationsCell is the count, what the checks found, and the weaker
// guarantee the backend declared, if any.
func violationsCell(tr tortureRun) string {
	s := fmt.Sprint(len(tr.violations))
	if n := len(tr.violations); n > 0 {
		checks := map[string]int{}
		for _, v := range tr.violations {
			checks[v.Check]++
		}
		s = fmt.Sprintf("**%d**: %s", n, kindList(checks))
	}
	if tr.allowed > 0 {
		s += fmt.Sprintf(" (a declared weaker guarantee, BreakOverlap: two holders after a broken connection for up to %v, the declared bound plus the checker's tolerance, are allowed, not counted)", tr.allowed)
	}
	if tr.err != nil {
		s += "; run error: " + cellErr(tr.err)
	}
	return s
}

// renderTorture is the document's torture section.
func (d *compareDoc) renderTorture(b *bytes.Buffer) {
	b.WriteString("## Torture: random operations under injected faults\n\n")
	if d.cfg.torture <= 0 {
		b.WriteString("Not run in this generation (`--torture 0`).\n\n")
		return
	}
	fmt.Fprintf(b, "Each store, in this run, under `conformance.Torture` for %v (seed %d), as `fencelock torture --url …` runs it: %d workers on %d lock names, over 2 direct Clients and 1 behind a fault proxy, take, extend and release leases (TTL %v, raised to the store's minimum) and write guarded registers, while a nemesis drawn from the seed injects faults one at a time (blackhole, reset and latency through the proxy; expire where the harness can drop a lock); then a liveness phase. The history is checked for two holders at once, fences that do not rise, writes accepted after a newer fence, lost register updates, and waiters that never get the lock. A seed replays the fault schedule, not the timing.\n\n",
		d.cfg.torture, d.cfg.tortureSeed, tortureWorkers, tortureNames, tortureTTL)
	var rows [][]string
	for _, r := range d.results {
		tr := r.torture
		switch {
		case r.url == "" && r.err != nil:
			rows = append(rows, []string{r.label, r.notMeasured(), "", "", ""})
		case tr.faults == nil:
			rows = append(rows, []string{r.label, "not run: " + cellErr(tr.err), "", "", "`" + tr.replay + "`"})
		default:
			rows = append(rows, []string{r.label, fmt.Sprintf("%d in %v", tr.ops, tr.elapsed.Round(time.Second)), countsByKind(tr.faults), violationsCell(tr), "`" + tr.replay + "`"})
		}
	}
	mdTable(b, []string{"backend", "operations checked", "faults injected", "violations", "reproduce (the URL of your server)"}, rows)
}

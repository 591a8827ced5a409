package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// peersFile is docs/bench/peers.json, written by `make bench-peers` (schema
// documented in bench/peers/result.go); fields compare does not use are
// ignored.
type peersFile struct {
	Schema    int               `json:"schema"`
	Date      string            `json:"date"`
	DurationS float64           `json:"duration_s"`
	GoVersion string            `json:"go_version"`
	Rounds    int               `json:"rounds"`
	Quick     bool              `json:"quick"`
	Servers   map[string]string `json:"servers"`
	Machine   struct {
		CPUs         int    `json:"cpus"`
		LoadAvgStart string `json:"load_avg_start"`
	} `json:"machine"`
	Impls  []peerImpl `json:"impls"`
	Floors []struct {
		ID      string                `json:"id"`
		Store   string                `json:"store"`
		What    string                `json:"what"`
		Metrics map[string]peerMetric `json:"metrics"`
	} `json:"floors"`
}

type peerImpl struct {
	ID        string                `json:"id"`
	Store     string                `json:"store"`
	Library   string                `json:"library"`
	Version   string                `json:"version"`
	Fencelock bool                  `json:"fencelock"`
	Notes     string                `json:"notes"`
	Metrics   map[string]peerMetric `json:"metrics"`
	Errors    []string              `json:"errors"`
}

// peerMetric is a median over the run's rounds with its spread.
type peerMetric struct{ Median, Min, Max float64 }

// peerStores maps compare's backend labels to bench-peers' store names.
var peerStores = map[string]string{
	"redis":      "redis",
	"redlock":    "redlock5",
	"etcd":       "etcd",
	"zookeeper":  "zookeeper",
	"pgadvisory": "postgres",
	"dynamodb":   "dynamodb",
}

// readPeers reads the peer benchmark results.
func readPeers(path string) (*peersFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("no peer results (run `make bench-peers` first): %w", err)
	}
	var p peersFile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if p.Schema != 1 {
		return nil, fmt.Errorf("%s: schema %d, want 1", path, p.Schema)
	}
	return &p, nil
}

// impls returns the implementations measured on store, fencelock's first.
func (p *peersFile) impls(store string) []peerImpl {
	var ours, theirs []peerImpl
	for _, im := range p.Impls {
		switch {
		case im.Store != store:
		case im.Fencelock:
			ours = append(ours, im)
		default:
			theirs = append(theirs, im)
		}
	}
	return append(ours, theirs...)
}

// cell formats metric m of im as "median (min–max)" in the unit's style.
func (im peerImpl) cell(m string, format func(float64) string) string {
	v, ok := im.Metrics[m]
	if !ok {
		return "—"
	}
	if v.Min == v.Max {
		return format(v.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", format(v.Median), format(v.Min), format(v.Max))
}

// cpuCell is the median CPU time per contended grant, "client + server"
// ("—" where bench-peers did not measure it).
func (im peerImpl) cpuCell() string {
	c, ok1 := im.Metrics[mClientCPU]
	s, ok2 := im.Metrics[mServerCPU]
	if !ok1 || !ok2 {
		return "—"
	}
	return fmtUS(c.Median) + " + " + fmtUS(s.Median)
}

func fmtUS(v float64) string { return us(time.Duration(v * float64(time.Microsecond))) }
func fmtMS(v float64) string { return us(time.Duration(v * float64(time.Millisecond))) }
func fmtInt(v float64) string {
	return fmt.Sprintf("%.0f", v)
}

// peerNames are the peers' names in tables and charts, by bench-peers id
// suffix; others show the suffix itself.
var peerNames = map[string]string{
	"mutex":               "concurrency.Mutex",
	"pgx-xact":            "pgx advisory xact lock",
	"lockclient-protocol": "AWS Lock Client protocol",
}

// name is the implementation's short name for tables and charts.
func (im peerImpl) name() string {
	_, variant, _ := strings.Cut(im.ID, "/")
	if im.Fencelock {
		v := strings.TrimPrefix(strings.TrimPrefix(variant, "fencelock"), "-")
		return strings.TrimSpace("fencelock " + v)
	}
	if n, ok := peerNames[variant]; ok {
		return n
	}
	return variant
}

func (d *compareDoc) renderPeers(b *bytes.Buffer) {
	b.WriteString(peersHeading + "\n\n")
	p := d.peers
	if p == nil {
		fmt.Fprintf(b, "Peer numbers were not included in this generation: %v.\n\n", d.peersErr)
		return
	}
	fmt.Fprintf(b, "From `make bench-peers` (docs/bench/peers.json, run %s, %.0f s, %d interleaved rounds%s, load average at start %s): fencelock and the library each store's users would otherwise pick, measured in the same run on the same servers (%s). Each cell is the median over the rounds (min–max over the rounds). Contention runs in turns, a store's implementations alternating (two 1 s turns each per round in the full run), and counts the grants made before each turn's end. Worst wait and re-grab %% tell fairness: an unfair lock lets the releaser take it straight back while others wait (a wait that a turn's end cut off counts until the end; *cut-off wait returns* is how long such a wait then took to return: what cancelling a wait costs). CPU per grant is the CPU time each contended grant cost this process (all 8 clients) + the server processes: the clients and the server share this machine's cores, so it bounds contended throughput (cores ÷ CPU per grant).\n\n",
		p.Date, p.DurationS, p.Rounds, map[bool]string{true: ", quick mode", false: ""}[p.Quick], p.Machine.LoadAvgStart, serverList(p.Servers))
	var rows [][]string
	for _, r := range d.results {
		store, ok := peerStores[r.label]
		ims := p.impls(store)
		if !ok || len(ims) == 0 {
			rows = append(rows, []string{r.label, "no peer (in-process only)", "", "", "", "", "", "", "", ""})
			continue
		}
		for i, im := range ims {
			label := ""
			if i == 0 {
				label = r.label
			}
			lib := im.name()
			if im.Fencelock {
				lib = "**" + lib + "**"
			}
			if len(im.Errors) > 0 {
				lib += fmt.Sprintf(" (%d round(s) failed)", len(im.Errors))
			}
			rows = append(rows, []string{label, lib,
				im.cell(mUncontP50, fmtUS),
				im.cell(mHandoffP50, fmtUS),
				im.cell(mDrain, fmtMS),
				im.cell(mThroughput, fmtInt) + "/s",
				im.cell(mWorstWait, fmtMS),
				im.cell(mCutoff, fmtMS),
				im.cell(mRegrab, fmtInt) + " %",
				im.cpuCell()})
		}
	}
	mdTable(b, []string{"backend", "library", "acquire+release p50", "hand-off p50", "8 waiters drained", "8-way contended", "worst wait", "cut-off wait returns", "re-grab", "CPU per grant (client + server)"}, rows)
	var floors []string
	for _, f := range p.Floors {
		if v, ok := f.Metrics["p50_us"]; ok {
			floors = append(floors, fmt.Sprintf("%s %s (%s)", f.ID, fmtUS(v.Median), f.What))
		}
	}
	if len(floors) > 0 {
		fmt.Fprintf(b, "Floors in the same run (p50): %s.\n\n", strings.Join(floors, "; "))
	}
}

// Metric keys of peers.json (bench/peers/measure.go).
const (
	mUncontP50  = "acquire_release_p50_us"
	mHandoffP50 = "handoff_p50_us"
	mHandoffP99 = "handoff_p99_us"
	mDrain      = "drain8_ms"
	mThroughput = "contended_per_s"
	mWorstWait  = "contended_worst_wait_ms"
	mCutoff     = "contended_cutoff_return_ms"
	mRegrab     = "contended_regrab_pct"
	mClientCPU  = "contended_client_cpu_us"
	mServerCPU  = "contended_server_cpu_us"
)

func serverList(m map[string]string) string {
	var parts []string
	for _, k := range []string{"redis", "etcd", "postgres", "zookeeper", "dynamodb"} {
		if v, ok := m[k]; ok {
			if !strings.HasPrefix(strings.ToLower(v), k) {
				v = k + " " + v
			}
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, ", ")
}

// peerContention is bench-peers' contention results, fencelock's and the
// peers', for the chart.
func (d *compareDoc) peerContention() []contentionPoint {
	if d.peers == nil {
		return nil
	}
	var ps []contentionPoint
	for _, im := range d.peers.Impls {
		t, ok1 := im.Metrics[mThroughput]
		w, ok2 := im.Metrics[mWorstWait]
		if !ok1 || !ok2 || t.Median <= 0 {
			continue
		}
		label := "peer: " + im.Store + " " + im.name()
		if im.Fencelock {
			label = im.Store + " " + im.name()
		}
		ps = append(ps, contentionPoint{label, t.Median, time.Duration(w.Median * float64(time.Millisecond))})
	}
	return ps
}

// peerHandoffs is the hand-off p50 and p99 of the bench-peers run, for
// the chart: the peer libraries' and, beside them, fencelock's from that
// same run, so that the chart never ranks numbers of two runs.
func (d *compareDoc) peerHandoffs() []handoffRow {
	if d.peers == nil {
		return nil
	}
	var rows []handoffRow
	for _, im := range d.peers.Impls {
		p50, ok1 := im.Metrics[mHandoffP50]
		p99, ok2 := im.Metrics[mHandoffP99]
		if !ok1 || !ok2 || p50.Median <= 0 {
			continue
		}
		m, hi := time.Duration(p50.Median*float64(time.Microsecond)), time.Duration(p99.Median*float64(time.Microsecond))
		label := "peer: " + im.Store + " " + im.name()
		if im.Fencelock {
			label = im.Store + " " + im.name() + " (bench-peers run)"
		}
		rows = append(rows, handoffRow{label: label, q: [5]time.Duration{m, m, m, m, hi}, peer: true, ours: im.Fencelock})
	}
	return rows
}

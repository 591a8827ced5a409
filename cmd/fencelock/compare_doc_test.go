package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
)

// TestCompareCoversEveryScheme: every URL scheme the CLI registers is
// measured by `fencelock compare`, so a new backend cannot be left out of
// docs/comparison.md.
func TestCompareCoversEveryScheme(t *testing.T) {
	covered := map[string]bool{}
	for _, b := range compareBackends {
		for _, s := range b.schemes {
			covered[s] = true
		}
	}
	for _, s := range fencelock.Schemes() {
		if !covered[s] {
			t.Errorf("scheme %q is registered by the CLI but no compareBackends entry measures it", s)
		}
	}
}

// fakeResults is one result per compare backend, every measurement filled
// in (failed is measured as failing, so its rows must still be there).
func fakeResults(failed string) []backendResult {
	var rs []backendResult
	for i, b := range compareBackends {
		r := backendResult{label: b.label, server: "test"}
		if b.label == failed {
			r.err = errFake
			rs = append(rs, r)
			continue
		}
		r.caps = fencelock.Capabilities{Backend: b.label, Fence: fencelock.FenceStrict, MinTTL: time.Millisecond}
		for j := range 100 {
			d := time.Duration(i+1) * time.Duration(j+1) * time.Microsecond
			r.lat, r.handoff = append(r.lat, d), append(r.handoff, 2*d)
		}
		r.cont = conformance.ContendedResult{Sections: 1000, Elapsed: time.Second, WaitMax: time.Duration(i+1) * time.Millisecond, PerWorker: []int{120, 130}}
		sr := &studyRun{profile: "study", cfg: conformance.StudyProfile(), runs: 1, resource: "memory", ttl: 200 * time.Millisecond,
			rates: []float64{0.05}, lost: map[float64]map[conformance.Mode][]int{0.05: {}}, rej: map[float64]map[conformance.Mode][]int{0.05: {}}}
		for _, m := range conformance.Modes() {
			sr.lost[0.05][m], sr.rej[0.05][m] = []int{int(m)}, []int{3}
		}
		r.study = sr
		r.hold, r.holdTTL = conformance.HoldManyResult{Leases: 1000, Goroutines: 3, HeapPerLease: 2048}, 3*time.Second
		r.failover = failoverResult{ttl: 500 * time.Millisecond, runs: []time.Duration{415 * time.Millisecond, 417 * time.Millisecond, 414 * time.Millisecond},
			paused: pausedOutcome{oldTerm: 7, newTerm: 9, replacedAfter: 510 * time.Millisecond}}
		r.torture = tortureRun{ops: 1234, faults: map[string]int{"reset": 2, "blackhole": 1}, elapsed: 31 * time.Second,
			replay: tortureReplay(b.label+"://…", conformance.TortureOptions{Duration: 30 * time.Second, Seed: 24, Workers: 6, Names: 3, TTL: 400 * time.Millisecond})}
		rs = append(rs, r)
	}
	return rs
}

var errFake = fakeErr("server did not start")

type fakeErr string

func (e fakeErr) Error() string { return string(e) }

// tables splits markdown into its tables: each a list of first cells of the
// body rows (header and separator dropped).
func tables(md string) [][]string {
	var out [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			if in {
				out = append(out, cur)
			}
			cur, in = nil, false
			continue
		}
		if !in {
			in = true // header row
			continue
		}
		if strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(line, "|")
		cur = append(cur, strings.TrimSpace(cells[1]))
	}
	if in {
		out = append(out, cur)
	}
	return out
}

// TestCompareDocHasEveryBackendInEveryTable renders the document from one
// result per backend (one of them failed to measure) and checks that every
// table of it has a row for every backend, and that the charts name every
// measured backend.
func TestCompareDocHasEveryBackendInEveryTable(t *testing.T) {
	t.Run("without peers", func(t *testing.T) { testCompareDoc(t, nil) })
	// Peer results for one store only: every other backend still gets its
	// row, and the peer shows in both charts.
	m := func(v float64) peerMetric { return peerMetric{v, v, v} }
	peers := &peersFile{Schema: 1, Impls: []peerImpl{
		{ID: "redis/fencelock", Store: "redis", Fencelock: true, Metrics: map[string]peerMetric{mUncontP50: m(100), mHandoffP50: m(300), mHandoffP99: m(900), mThroughput: m(5000), mWorstWait: m(30)}},
		{ID: "redis/redislock", Store: "redis", Library: "github.com/bsm/redislock", Metrics: map[string]peerMetric{mUncontP50: m(90), mHandoffP50: m(50000), mHandoffP99: m(90000), mThroughput: m(7000), mWorstWait: m(2000)}},
	}}
	t.Run("with peers", func(t *testing.T) {
		d := testCompareDoc(t, peers)
		for name, svg := range d.charts() {
			if !bytes.Contains(svg, []byte("peer: redis redislock")) {
				t.Errorf("%s has no mark for the peer", name)
			}
		}
		if svg := d.charts()["handoff.svg"]; !bytes.Contains(svg, []byte(">redis fencelock (bench-peers run)<")) {
			t.Errorf("the hand-off chart has no mark for fencelock from the peers' run, beside the peers")
		}
		if svg := d.charts()["contention.svg"]; !bytes.Contains(svg, []byte(">redis fencelock<")) {
			t.Errorf("the contention chart has no mark for fencelock from the peers' run")
		}
	})
}

func testCompareDoc(t *testing.T, peers *peersFile) *compareDoc {
	failed := compareBackends[2].label
	d := &compareDoc{cmd: "test", date: time.Now(), cfg: compareConfig{n: 100, handoffs: 100, dur: time.Second, studySections: 400, studyRuns: 1, studyRate: 0.05, held: 1000,
		failoverRuns: 3, failoverTTL: 500 * time.Millisecond, torture: 30 * time.Second, tortureSeed: 24},
		results: fakeResults(failed), faults: renderFaultTable(nil), peers: peers, peersErr: errFake}
	md := string(d.render())
	ts := tables(md)
	want := 8 // servers, guarantees, faults, election, torture, speed, cost, study
	if peers != nil {
		want++
	}
	if len(ts) < want {
		t.Fatalf("found %d tables, want at least %d:\n%s", len(ts), want, md)
	}
	for i, rows := range ts {
		for _, b := range compareBackends {
			if !slices.Contains(rows, b.label) {
				t.Errorf("table %d has no row for %q (rows %q)", i, b.label, rows)
			}
		}
	}
	if !strings.Contains(md, "not measured: "+errFake.Error()) {
		t.Errorf("the failed backend's rows do not say why")
	}
	for name, svg := range d.charts() {
		if !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.HasSuffix(svg, []byte("</svg>\n")) {
			t.Errorf("%s is not an SVG document", name)
		}
		for _, b := range compareBackends {
			if b.label == failed || (name == "contention.svg" && peers != nil) {
				continue // with peers, the contention chart is bench-peers' run
			}
			if !bytes.Contains(svg, []byte(">"+b.label+"<")) {
				t.Errorf("%s has no mark for %q", name, b.label)
			}
		}
	}
	return d
}

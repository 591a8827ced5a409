package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// wantImpls is every implementation Start sets up, by store.
var wantImpls = map[string][]string{
	"redis":     {"redis/fencelock", "redis/redislock", "redis/redsync"},
	"etcd":      {"etcd/fencelock", "etcd/mutex"},
	"postgres":  {"postgres/fencelock-strict", "postgres/fencelock-noflush", "postgres/pgx-xact"},
	"zookeeper": {"zookeeper/fencelock", "zookeeper/zk.Lock"},
	"redlock5":  {"redlock5/fencelock", "redlock5/redsync"},
	"dynamodb":  {"dynamodb/fencelock", "dynamodb/lockclient-protocol"},
}

var wantFloors = []string{"redis/ping", "etcd/put", "postgres/commit", "zookeeper/exists"}

// TestQuickRun runs the whole program's path in quick mode with tiny
// counts on every store and checks that the JSON holds every
// implementation and floor, without errors, with sane metrics.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts every server (about a minute)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	env, err := Start(ctx, nil)
	if errors.Is(err, testserver.ErrMissing) {
		testserver.Unavailable(t, "a lock store", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()

	cfg := QuickConfig()
	cfg.Rounds = 2
	cfg.Counts = Counts{Uncontended: 5, Handoffs: 2, Drains: 1, Workers: 3,
		Contention: 300 * time.Millisecond, Settle: 20 * time.Millisecond, Floor: 5}
	res := Run(ctx, env, cfg)

	js, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got Result
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, res) {
		t.Errorf("the JSON does not round-trip:\n%s", js)
	}
	if got.Schema != SchemaVersion || got.Rounds != 2 || !got.Quick || got.GoVersion == "" || got.Date == "" || got.Machine.CPUs < 1 {
		t.Errorf("header: %+v", got)
	}
	for _, s := range Stores() {
		if got.Servers[s] == "" {
			t.Errorf("no server version for %s", s)
		}
	}
	if !strings.Contains(got.Servers["postgres"], "fsync=on") {
		t.Errorf("postgres runs without fsync: %s", got.Servers["postgres"])
	}

	byID := map[string]ImplResult{}
	for _, im := range got.Impls {
		byID[im.ID] = im
	}
	n := 0
	for store, ids := range wantImpls {
		for _, id := range ids {
			n++
			im, ok := byID[id]
			if !ok {
				t.Errorf("%s: missing", id)
				continue
			}
			checkImpl(t, store, im, cfg.Counts.Contention)
		}
	}
	if len(got.Impls) != n {
		t.Errorf("%d implementations, want %d", len(got.Impls), n)
	}
	floors := map[string]FloorResult{}
	for _, f := range got.Floors {
		floors[f.ID] = f
	}
	for _, id := range wantFloors {
		f, ok := floors[id]
		if !ok || len(f.Errors) > 0 || f.Metrics[MFloorP50].Median <= 0 || f.Metrics[MFloorP99].Median < f.Metrics[MFloorP50].Median {
			t.Errorf("floor %s: %+v", id, f)
		}
	}

	var md bytes.Buffer
	Markdown(&md, &got)
	for id := range byID {
		if !strings.Contains(md.String(), id) {
			t.Errorf("the table has no row for %s", id)
		}
	}
}

func checkImpl(t *testing.T, store string, im ImplResult, contention time.Duration) {
	t.Helper()
	if im.Store != store || im.Library == "" || im.Version == "" || im.Notes == "" {
		t.Errorf("%s: header %+v", im.ID, im)
	}
	if im.Fencelock != strings.HasSuffix(strings.SplitN(im.ID, "-", 2)[0], "/fencelock") {
		t.Errorf("%s: fencelock=%v", im.ID, im.Fencelock)
	}
	// A chunk may fail on a loaded machine under -race (a Redlock grant
	// that took longer than its validity is refused); the run records it
	// and the metrics below still need a good round.
	if len(im.Errors) > 0 {
		t.Logf("%s: errors %v", im.ID, im.Errors)
	}
	m := im.Metrics
	for _, k := range []string{MUncontP50, MUncontP99, MAllocs, MHandoffP50, MHandoffP99, MDrain, MThroughput, MWorstWait, MWorkerMax} {
		v, ok := m[k]
		if !ok || v.Median <= 0 || v.Min > v.Median || v.Median > v.Max {
			t.Errorf("%s: %s = %+v (ok %v), want > 0 and min ≤ median ≤ max", im.ID, k, v, ok)
		}
	}
	if m[MUncontP99].Median < m[MUncontP50].Median || m[MHandoffP99].Median < m[MHandoffP50].Median {
		t.Errorf("%s: p99 below p50: %+v", im.ID, m)
	}
	if r := m[MWorkerRatio].Median; r < 1 {
		t.Errorf("%s: worker max/min %v < 1", im.ID, r)
	}
	if r := m[MRegrab].Median; r < 0 || r > 100 {
		t.Errorf("%s: re-grab %v%%", im.ID, r)
	}
	if runtime.GOOS == "linux" {
		// The server's CPU time comes in 10 ms ticks: a short run may see
		// none, but it is measured.
		if v, ok := m[MClientCPU]; !ok || v.Median <= 0 {
			t.Errorf("%s: %s = %+v (ok %v), want > 0 on Linux", im.ID, MClientCPU, v, ok)
		}
		if v, ok := m[MServerCPU]; !ok || v.Median < 0 {
			t.Errorf("%s: %s = %+v (ok %v), want ≥ 0 on Linux", im.ID, MServerCPU, v, ok)
		}
	}
	// A wait counts until its turn's end at most; what a wait cut off by
	// the end took to return after it is a measure of its own.
	if w, turn := m[MWorstWait].Max, contention/contentionTurns; w > ms(turn) {
		t.Errorf("%s: worst wait %v ms, longer than the %v turn", im.ID, w, turn)
	}
	if v, ok := m[MCutoffReturn]; !ok || v.Min < 0 {
		t.Errorf("%s: %s = %+v (ok %v), want ≥ 0", im.ID, MCutoffReturn, v, ok)
	}
	if m[MWorkerMin].Median > m[MWorkerMax].Median {
		t.Errorf("%s: worker min %v > max %v", im.ID, m[MWorkerMin].Median, m[MWorkerMax].Median)
	}
}

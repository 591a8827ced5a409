package peers

// Result is the JSON document `make bench-peers` writes to
// docs/bench/peers.json. The schema is stable (Schema counts breaking
// changes); readers should ignore fields they do not know:
//
//	{
//	  "schema": 1,
//	  "date": "2026-12-02T18:00:00Z",        // RFC 3339, UTC, run start
//	  "duration_s": 412.3,                    // whole run, servers included
//	  "go_version": "go1.26.0",
//	  "machine": {"os": "linux", "arch": "amd64", "cpus": 2, "hostname": "…",
//	              "load_avg_start": "8.8 11.4 7.9", "note": "…"},
//	  "quick": false,
//	  "rounds": 5,
//	  "counts": {"uncontended": 300, "handoffs": 20, "drains": 3, "workers": 8,
//	             "contention_ns": 2e9, "settle_ns": 3e7, "floor": 300}, // Counts, per chunk
//	  "servers": {"redis": "7.0.15", "postgres": "15.x (fsync=on …)", …},
//	  "impls": [{
//	    "id": "redis/redislock",              // store/library, unique
//	    "store": "redis",                     // redis, redlock5, etcd, postgres, zookeeper, dynamodb
//	    "library": "github.com/bsm/redislock",
//	    "version": "v0.9.4",                  // module version as built
//	    "fencelock": false,                   // true for fencelock's own
//	    "notes": "…",                         // configuration and usage
//	    "metrics": {"acquire_release_p50_us": {"median": 41.2, "min": 30.1, "max": 60.0}, …},
//	    "errors": ["round 2: …"]              // chunks that failed (absent when none)
//	  }, …],
//	  "floors": [{"id": "redis/ping", "store": "redis", "what": "…",
//	              "metrics": {"p50_us": {…}, "p99_us": {…}}}]
//	}
//
// Every metric is the median over the rounds with the min and max over the
// rounds (the spread); a round whose chunk failed contributes nothing.
// Metric keys (the M* constants): acquire_release_p50_us/_p99_us
// (uncontended, one client: TryAcquire-style then release; µs),
// allocs_per_op (heap allocations of the whole process per pair),
// handoff_p50_us/_p99_us (holder's release call starts → a blocked waiter
// on another client holds), drain8_ms (release → all 8 blocked waiters have
// held once, each releasing at once), contended_per_s (grants per second, 8
// clients looping wait+release on one key), contended_worst_wait_ms (longest
// single wait for a grant; a wait cut off by the run's end counts until
// the end), contended_cutoff_return_ms (the longest a wait cut off by the
// run's end took to return after it: the cost of a cancelled wait),
// contended_worker_min/_max (grants of the least and most served worker),
// contended_worker_max_over_min (a worker with none counts as 1),
// contended_regrab_pct (grants that went to the worker that held the
// previous grant), contended_client_cpu_us and contended_server_cpu_us
// (CPU time per grant during the contention run: this process, which runs
// every client, and the store's server processes with their children; on
// Linux only, and the server's in 10 ms ticks). Floors: p50_us, p99_us.
type Result struct {
	Schema    int               `json:"schema"`
	Date      string            `json:"date"`
	DurationS float64           `json:"duration_s"`
	GoVersion string            `json:"go_version"`
	Machine   Machine           `json:"machine"`
	Quick     bool              `json:"quick"`
	Rounds    int               `json:"rounds"`
	Counts    Counts            `json:"counts"`
	Servers   map[string]string `json:"servers"`
	Impls     []ImplResult      `json:"impls"`
	Floors    []FloorResult     `json:"floors"`
}

// Machine describes where the run ran.
type Machine struct {
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	CPUs     int    `json:"cpus"`
	Hostname string `json:"hostname"`
	// LoadAvgStart is /proc/loadavg's 1, 5 and 15 minute averages at the
	// start (empty where there is none).
	LoadAvgStart string `json:"load_avg_start,omitempty"`
	Note         string `json:"note,omitempty"`
}

// Metric is one measure over the rounds.
type Metric struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// ImplResult is one implementation's result.
type ImplResult struct {
	ID        string            `json:"id"`
	Store     string            `json:"store"`
	Library   string            `json:"library"`
	Version   string            `json:"version"`
	Fencelock bool              `json:"fencelock"`
	Notes     string            `json:"notes"`
	Metrics   map[string]Metric `json:"metrics"`
	Errors    []string          `json:"errors,omitempty"`
}

// FloorResult is one floor's result.
type FloorResult struct {
	ID      string            `json:"id"`
	Store   string            `json:"store"`
	What    string            `json:"what"`
	Metrics map[string]Metric `json:"metrics"`
	Errors  []string          `json:"errors,omitempty"`
}

// SchemaVersion is Result.Schema.
const SchemaVersion = 1

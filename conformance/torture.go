package conformance

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
)

// TortureOptions configures Torture. The zero value runs 30 s with 6
// workers on 3 names, a random seed and in-memory registers.
type TortureOptions struct {
	// Duration is how long the workers run random operations while the
	// nemesis injects faults; the liveness phase comes after it.
	// Default: 30s.
	Duration time.Duration
	// Seed seeds every random choice: each worker's operations and the
	// nemesis's fault schedule. Timing is not reproducible, so a seed
	// replays the same schedule, not the same interleaving. 0: a random
	// seed, reported in the result.
	Seed uint64
	// Workers is how many concurrent workers run operations, spread over
	// the run's Clients (two direct, and one behind the fault proxy when
	// the harness is a Partitioner); where a child process can run a
	// Client (see ChildArgs), the last worker uses that one alone.
	// Default: 6.
	Workers int
	// Names is how many lock names the workers share. Default: 3.
	Names int
	// TTL is the lease TTL, raised to the store's MinTTL. Default: 400ms.
	TTL time.Duration
	// Register returns the guarded register called name (one claim-first
	// and one write-only register per lock name), created at value 0 and
	// fence 0. Default: a guard.Counter in memory.
	Register func(ctx context.Context, name string) (guard.Resource, error)
	// Out receives progress lines (the seed, the fault schedule). Default:
	// nothing.
	Out io.Writer
	// Restart, where the caller owns the store's server, kills it and
	// starts it again (empty where the store keeps locks in memory only),
	// returning once it serves; the nemesis then also restarts the store
	// (as it does through a harness that is a StoreRestarter).
	Restart func(ctx context.Context) error
	// RestartLosesLocks says Restart may lose held locks (a server
	// restarted empty, one Redlock primary of five): an untold holder's
	// overlap with a grant after it is then excused, as after an expire.
	// Otherwise (a consensus store's leader restarted) it is not.
	RestartLosesLocks bool
	// Pause and Resume, where the caller owns the server, stop and
	// continue its process (SIGSTOP, SIGCONT); the nemesis then also
	// pauses the server.
	Pause, Resume func() error
	// ChildArgs are the arguments the running binary is re-executed with
	// to run a torture worker's Client in a child process (Linux, a
	// harness with a URL), which the nemesis then freezes (SIGSTOP) and
	// resumes. The child must reach conformance.MaybeRunChild (or
	// RunTorture, which sets ChildArgs to run its own test) before
	// anything else. In a test binary nil means no child worker; outside
	// one (a binary whose main calls MaybeRunChild first) nil is no
	// arguments.
	ChildArgs []string
	// NoChild: no worker runs in a child process.
	NoChild bool
}

// StoreRestarter is an optional Harness hook: restart the store, as a
// crash or an operator would. Locks the store keeps only in memory are
// lost (the holders are not told); what it keeps durably it keeps.
// RestartStore returns once the store answers again. The torture nemesis
// uses it.
type StoreRestarter interface {
	RestartStore(ctx context.Context) error
}

// TortureMeta describes a run; a history file starts with it.
type TortureMeta struct {
	Backend string `json:"backend"`
	Seed    uint64 `json:"seed"`
	Workers int    `json:"workers"`
	Names   int    `json:"names"`
	// Proxied is the index of the Client behind the fault proxy, or -1.
	Proxied int `json:"proxied"`
	// Child is the index of the Client in a child process (the target of
	// freeze-client faults), or -1.
	Child    int           `json:"child"`
	Duration time.Duration `json:"duration"`
	TTL      time.Duration `json:"ttl"`
	StoreTTL time.Duration `json:"store_ttl"`
	// MaxTTL is the longest TTL a worker asks for (an Extend to a longer
	// TTL): how far past a store-side drop an untold holder may believe.
	MaxTTL time.Duration `json:"max_ttl"`
	// RestartLosesLocks: a restart fault may drop held locks.
	RestartLosesLocks bool `json:"restart_loses_locks"`
	// AllowedOverlap is how long two holders may both believe they hold a
	// name: the declared BreakOverlap and its tolerance, or 0.
	AllowedOverlap time.Duration `json:"allowed_overlap"`
	// StoreSlack is how long after its holder stopped believing a lease
	// the store may still keep it (the effective TTL and the margin).
	StoreSlack time.Duration `json:"store_slack"`
	// LiveBound is how long each liveness-phase Acquire may take.
	LiveBound time.Duration `json:"live_bound"`
}

// TortureResult is a finished run.
type TortureResult struct {
	Meta       TortureMeta
	History    *History
	Violations []Violation
	Elapsed    time.Duration
	// Schedule is the nemesis's fault schedule, as drawn from the seed.
	Schedule []string
}

// Ops is how many operations the run recorded.
func (r *TortureResult) Ops() int { return len(r.History.Ops()) }

// FaultCount is how many faults the nemesis injected.
func (r *TortureResult) FaultCount() int { return len(r.History.Faults()) }

// RandomSeed returns a nonzero seed from the system's randomness.
func RandomSeed() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	if s := binary.LittleEndian.Uint64(b[:]); s != 0 {
		return s
	}
	return 1
}

// Torture runs random lock and guarded-register operations from several
// workers on h's store while a nemesis injects faults chosen from the
// seed, records every operation, and checks the history (CheckHistory).
// It returns an error only if the run could not start (no client); a
// history that breaks the contract is reported in Violations. It never
// hangs: every operation has a deadline, and so has the run.
func Torture(ctx context.Context, h Harness, o TortureOptions) (*TortureResult, error) {
	o = o.withDefaults()
	prefix := "fencelock-torture-" + randHex(4) + "/"
	probe, err := h.MakeClient(ctx, &fencelock.Options{Prefix: prefix})
	if err != nil {
		return nil, fmt.Errorf("torture: make client: %w", err)
	}
	caps := probe.Capabilities()
	ttl := shortTTL(caps, o.TTL)
	storeTTL := grantedTTL(ctx, probe, ttl)
	_ = probe.Close()
	eff := max(ttl, storeTTL)
	margin := max(time.Second, 2*eff)
	r := &run{
		o: o, h: h, prefix: prefix, caps: caps, ttl: ttl, eff: eff, margin: margin, hist: newHistory(),
		leases: &leaseTable{byName: map[string]map[int64]*liveLease{}}, healed: make(chan struct{}), allIn: make(chan struct{}),
	}
	for i := range o.Names {
		r.names = append(r.names, fmt.Sprintf("n%d", i))
	}
	r.hist.Meta = TortureMeta{
		Backend: caps.Backend, Seed: o.Seed, Workers: o.Workers, Names: o.Names, Proxied: -1, Child: -1, Duration: o.Duration,
		TTL: ttl, StoreTTL: storeTTL, MaxTTL: 2 * ttl, StoreSlack: eff + margin, LiveBound: r.liveBound(),
	}
	if _, ok := h.(StoreRestarter); ok || o.RestartLosesLocks {
		r.hist.Meta.RestartLosesLocks = true
	}
	if b := caps.BreakOverlap; b > 0 {
		r.hist.Meta.AllowedOverlap = b + promiseTol(b)
	}
	if err := r.open(ctx, prefix); err != nil {
		r.close()
		return nil, err
	}
	r.logf("torture on %s: seed %d, %d workers on %d Clients (proxied: %d, in a child process: %d), %d names, TTL %v (store %v), %v",
		caps.Backend, o.Seed, o.Workers, len(r.clients)+btoi(r.child != nil), r.hist.Meta.Proxied, r.hist.Meta.Child, o.Names, ttl, storeTTL, o.Duration)
	// The run's own deadline: the random phase, the liveness phase and a
	// margin for the operations in flight.
	rctx, cancel := context.WithTimeout(ctx, o.Duration+r.liveBound()+r.opTimeout()+2*margin)
	defer cancel()
	if r.child != nil {
		// The run's deadline ends the child too, and with it any wait
		// for its reply.
		stop := context.AfterFunc(rctx, r.child.kill)
		defer stop()
	}
	start := time.Now()
	r.stopAt = r.hist.now() + o.Duration
	var wg sync.WaitGroup
	wg.Go(func() { r.nemesis(rctx) })
	for k := range o.Workers {
		w := r.worker(k)
		wg.Go(func() { w.run(rctx) })
	}
	wg.Wait()
	r.finalReads(rctx)
	r.close()
	r.hist.closeOpen()
	res := &TortureResult{Meta: r.hist.Meta, History: r.hist, Elapsed: time.Since(start)}
	for _, p := range r.schedule() {
		res.Schedule = append(res.Schedule, p.String())
	}
	res.Violations = CheckHistory(r.hist)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("torture: %w", err)
	}
	return res, nil
}

func (o TortureOptions) withDefaults() TortureOptions {
	if o.Duration <= 0 {
		o.Duration = 30 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = RandomSeed()
	}
	if o.Workers <= 0 {
		o.Workers = 6
	}
	if o.Names <= 0 {
		o.Names = 3
	}
	if o.Register == nil {
		o.Register = func(context.Context, string) (guard.Resource, error) { return &guard.Counter{}, nil }
	}
	return o
}

// run is one torture run in progress.
type run struct {
	o      TortureOptions
	h      Harness
	prefix string
	caps   fencelock.Capabilities
	ttl    time.Duration
	eff    time.Duration // effective TTL: the longer of ttl and what the store grants
	margin time.Duration
	hist   *History
	names  []string
	leases *leaseTable

	clients []*fencelock.Client
	child   *childProc // the Client in a child process, or nil
	faults  *Faults    // the proxied Client's, or nil
	regs    map[string]guard.Resource
	stopAt  time.Duration // end of the random phase
	healed  chan struct{} // closed when the nemesis healed its last fault
	arrived atomic.Int32  // workers done with the random phase
	allIn   chan struct{} // closed when every worker is
}

// open makes the Clients and the registers.
func (r *run) open(ctx context.Context, prefix string) error {
	for range 2 {
		c, err := r.h.MakeClient(ctx, &fencelock.Options{Prefix: prefix})
		if err != nil {
			return fmt.Errorf("torture: make client: %w", err)
		}
		r.clients = append(r.clients, c)
	}
	if p, ok := r.h.(Partitioner); ok {
		c, f, err := p.PartitionedClient(ctx, &fencelock.Options{Prefix: prefix})
		switch {
		case errors.Is(err, fencelock.ErrInvalid):
			r.logf("no fault proxy can stand between a client and this store: no network faults (%v)", err)
		case err != nil:
			return fmt.Errorf("torture: make proxied client: %w", err)
		default:
			r.hist.Meta.Proxied = len(r.clients)
			r.clients = append(r.clients, c)
			r.faults = f
		}
	}
	if err := r.openChild(); err != nil {
		return err
	}
	r.regs = map[string]guard.Resource{}
	for _, n := range r.names {
		for _, reg := range []string{cfReg(n), woReg(n)} {
			res, err := r.o.Register(ctx, reg)
			if err != nil {
				return fmt.Errorf("torture: register %s: %w", reg, err)
			}
			r.regs[reg] = res
		}
	}
	return nil
}

// close closes the Clients (healing the proxy first, so that their
// Releases get through) and the proxies.
func (r *run) close() {
	if r.faults != nil {
		r.faults.Heal()
	}
	for _, c := range r.clients {
		_ = c.Close()
	}
	if r.child != nil {
		r.child.kill()
	}
	if r.faults != nil {
		r.faults.Close()
	}
}

// openChild starts the child-process Client where it can run: on
// Linux, with a URL, and a way to re-execute this binary as the child.
func (r *run) openChild() error {
	url := r.h.URL()
	args := r.o.ChildArgs
	switch {
	case r.o.NoChild || r.o.Workers < 2:
		return nil
	case !childWorkers:
		r.logf("no client process to freeze: SIGSTOP needs Linux")
		return nil
	case url == "":
		r.logf("no client process to freeze: the harness gives no URL for a second process")
		return nil
	case args == nil && testing.Testing():
		r.logf("no client process to freeze: no ChildArgs to re-execute this test binary with")
		return nil
	}
	p, err := startTortureChild(url, r.prefix, r.ttl, args)
	if err != nil {
		return fmt.Errorf("torture: %w", err)
	}
	r.child = p
	r.hist.Meta.Child = len(r.clients)
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// readyWithin bounds a torture child's start (a re-executed binary that
// opens one Client).
const readyWithin = 30 * time.Second

func cfReg(name string) string { return "cf/" + name }
func woReg(name string) string { return "wo/" + name }

// opTimeout bounds every operation.
func (r *run) opTimeout() time.Duration { return 4*r.eff + r.margin }

// liveBound: every worker, all contending for one name after the last
// heal, is granted within the effective TTL (a stale lease), a wake-up
// per worker ahead of it, and the margin.
func (r *run) liveBound() time.Duration {
	wake := r.margin / 2
	if w := r.caps.ReleaseWake; w > 0 {
		wake = w + promiseTol(w)
	}
	return r.eff + time.Duration(r.o.Workers)*(wake+liveHold) + r.margin
}

// liveHold is how long a liveness-phase holder keeps the lock.
const liveHold = 50 * time.Millisecond

func (r *run) logf(format string, args ...any) {
	if r.o.Out != nil {
		fmt.Fprintf(r.o.Out, format+"\n", args...)
	}
}

// rng returns a generator for stream k of the run's seed.
func (r *run) rng(k uint64) *rand.Rand { return rand.New(rand.NewPCG(r.o.Seed, k)) }

// finalReads records each register's value after the run (what the
// lost-update check counts against).
func (r *run) finalReads(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opTimeout())
	defer cancel()
	for _, n := range r.names {
		reg := cfReg(n)
		op := &Op{Worker: -1, Client: -1, Kind: OpRead, Name: reg, Invoke: r.hist.now(), Phase: "final"}
		v, err := r.regs[reg].Read(ctx)
		op.Complete, op.Value, op.Result = r.hist.now(), v, classify(err)
		op.Err = errText(err)
		r.hist.add(op)
	}
}

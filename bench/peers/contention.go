package peers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// contentionTurns is how many turns a round's contention run of each
// implementation is cut into, a store's implementations taking turns
// (the first place rotating from turn to turn: a b, b a). Two 2 s runs
// one after the other put fencelock over redislock anywhere from 0.74×
// to 1.01× round by round, with both ranges overlapping: a shift in the
// loopback's speed lasts seconds and landed on one run only. A turn still
// lasts long enough (a second in the full run) to show a starving
// worker's wait.
const contentionTurns = 2

// tally adds up one implementation's contention turns in a round.
type tally struct {
	counts  []int // grants per worker
	firsts  int   // turns with a grant: their first grants re-grab nothing
	regrabs int
	worst   time.Duration // the longest wait, each up to its turn's end
	cut     time.Duration // the longest return of a wait a turn's end cut off
	ran     time.Duration // the turns' lengths
	cpu     time.Duration // this process's CPU time within the turns
	srv     time.Duration // the server processes' CPU time within the turns
	srvOK   bool
}

func newTally(workers int) *tally { return &tally{counts: make([]int, workers), srvOK: true} }

// contendTurn runs the workers on one key for d, each looping Wait,
// release, and adds to t what happened up to the turn's end: the grants
// that returned before it, every wait (one the end cut off counts until
// the end), re-grabs, and CPU time of this process (every client) and of
// the store's server processes (server, if not nil) sampled at the end.
// Grants after the end and the unwinding of cut-off waits (what a
// cancelled wait costs, reported as the cut-off return) are not
// contention: a run that never ends has none.
func contendTurn(ctx context.Context, workers []Lock, server func() []int, key string, d time.Duration, t *tally) error {
	if err := warm(ctx, workers, key); err != nil {
		return err
	}
	var pids []int
	if server != nil {
		pids = server()
	}
	srv0, srvOK := serverCPU(pids)
	start, cpu0 := time.Now(), processCPU()
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	sampled := sampleAtEnd(rctx, pids)
	r := &turnRun{ctx: ctx, rctx: rctx, key: key, counts: make([]int, len(workers))}
	r.end, _ = rctx.Deadline()
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() { r.work(i, w) })
	}
	wg.Wait()
	cancel()
	e := <-sampled
	if err := errors.Join(r.errs...); err != nil {
		return err
	}
	n := 0
	for i, c := range r.counts {
		t.counts[i] += c
		n += c
	}
	if n > 0 {
		t.firsts++
	}
	t.regrabs += int(r.regrabs.Load())
	t.worst, t.cut = max(t.worst, r.worst), max(t.cut, r.cut)
	t.ran += e.at.Sub(start)
	t.cpu += e.cpu - cpu0
	t.srv += e.srv - srv0
	t.srvOK = t.srvOK && srvOK && e.srvOK
	return nil
}

// endSample is the time and the CPU times at a turn's end.
type endSample struct {
	at       time.Time
	cpu, srv time.Duration
	srvOK    bool
}

// sampleAtEnd samples this process's and the pids' CPU time when ctx
// ends, on the returned channel.
func sampleAtEnd(ctx context.Context, pids []int) <-chan endSample {
	c := make(chan endSample, 1)
	go func() {
		<-ctx.Done()
		e := endSample{at: time.Now(), cpu: processCPU()}
		e.srv, e.srvOK = serverCPU(pids)
		c <- e
	}()
	return c
}

// turnRun is one contention turn's shared state.
type turnRun struct {
	ctx, rctx context.Context // the caller's; the turn's, ending at end
	end       time.Time
	key       string
	last      atomic.Int64 // worker index+1 of the previous grant
	regrabs   atomic.Int64
	counts    []int // grants per worker before the end

	mu         sync.Mutex
	worst, cut time.Duration
	errs       []error
}

// work is worker i's loop: Wait, release, until the turn's end.
func (r *turnRun) work(i int, w Lock) {
	var worst, cut time.Duration
	var err error
	for r.rctx.Err() == nil {
		t0 := time.Now()
		var u Unlock
		u, err = w.Wait(r.rctx, r.key)
		if err != nil {
			if r.rctx.Err() != nil {
				// Cut off by the turn's end: it waited until the
				// end, and then took cut to return.
				worst = max(worst, r.end.Sub(t0))
				cut, err = time.Since(r.end), nil
			}
			break
		}
		got := time.Now()
		worst = max(worst, min(got.Sub(t0), r.end.Sub(t0))) // a grant after the end waited until the end
		if got.Before(r.end) {
			r.counts[i]++
			if r.last.Swap(int64(i+1)) == int64(i+1) {
				r.regrabs.Add(1)
			}
		}
		if err = u(context.WithoutCancel(r.ctx)); err != nil {
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.worst, r.cut = max(r.worst, worst), max(r.cut, cut)
	r.errs = append(r.errs, err)
}

// warm has every worker take and release a key of its own (Wait: not
// every peer has a non-blocking acquire; nobody else waits), untimed,
// before a turn: a client whose wait the previous turn's end cut off may
// have closed its connection (raw pgx breaks it, fencelock's strict
// Postgres closes it), and dialling again is no part of contention.
func warm(ctx context.Context, workers []Lock, key string) error {
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() {
			u, err := w.Wait(ctx, fmt.Sprintf("%s-warm%d", key, i))
			if err == nil {
				err = u(ctx)
			}
			if err != nil {
				errs[i] = fmt.Errorf("warm-up: %w", err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// write stores the turns' measures in s: throughput over the turns'
// lengths, worst wait, cut-off return, spread, re-grabs (the first grant
// of a turn re-grabs nothing) and CPU time per grant.
func (t *tally) write(s sample) {
	total := 0
	for _, c := range t.counts {
		total += c
	}
	lo, hi := slices.Min(t.counts), slices.Max(t.counts)
	s[MThroughput] = float64(total) / t.ran.Seconds()
	s[MWorstWait] = ms(t.worst)
	s[MCutoffReturn] = ms(t.cut)
	s[MWorkerMin] = float64(lo)
	s[MWorkerMax] = float64(hi)
	s[MWorkerRatio] = float64(hi) / float64(max(lo, 1)) // a starved worker counts as 1
	if total > t.firsts {
		s[MRegrab] = 100 * float64(t.regrabs) / float64(total-t.firsts)
	}
	if total > 0 && t.cpu > 0 {
		s[MClientCPU] = us(t.cpu) / float64(total)
	}
	if total > 0 && t.srvOK {
		s[MServerCPU] = us(t.srv) / float64(total)
	}
}

// contendSideBySide runs the contention of a store's implementations idx
// (in that order, already rotated for the round) in contentionTurns turns
// each, the first place rotating from turn to turn, and writes each one's
// measures into its sample in side. An implementation whose turn fails
// takes no more turns; its error is returned in errs (by position in idx).
func contendSideBySide(ctx context.Context, env *Env, cfg Config, round int, runs []*implRun, idx []int, side []sample) []error {
	errs := make([]error, len(idx))
	tallies := make([]*tally, len(idx))
	for j := range idx {
		tallies[j] = newTally(cfg.Counts.Workers)
	}
	d := cfg.Counts.Contention / contentionTurns
	for turn := range contentionTurns {
		for k := range idx {
			j := (turn + k) % len(idx)
			if errs[j] != nil {
				continue
			}
			i := idx[j]
			tctx, cancel := context.WithTimeout(ctx, cfg.ChunkTimeout)
			errs[j] = contendTurn(tctx, runs[i].clients[1:], env.Impls[i].Server, keyBase(env.Impls[i].ID, round)+"-c", d, tallies[j])
			cancel()
		}
	}
	for j, i := range idx {
		if errs[j] == nil {
			tallies[j].write(side[i])
		}
	}
	return errs
}

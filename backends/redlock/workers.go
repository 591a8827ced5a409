package redlock

import (
	"runtime"
	"sync"
)

// workers runs one primary's fan-out calls (see fanInto) on at most max
// goroutines, reused from call to call, in the order they were asked for.
//
// Reuse: a call through go-redis runs deep enough that a fresh goroutine's
// stack grows, and is copied, a few times on every call; under contention
// that copying was a tenth of the Client's CPU. Up to maxIdle goroutines
// stay parked between calls.
//
// The bound: a Client holding many leases renews them in bursts (every
// TTL/3), one call per lease and primary; with a goroutine per call a
// burst of 10,000 leases was 50,000 goroutines, most of them waiting for
// one of go-redis's connections anyway. max is the primary's client's
// pool size, so a call waits here instead of in go-redis's pool, and the
// Client's goroutines stay bounded by its primaries, not by its leases.
// Each call ends by its deadline, so a frozen primary holds up only the
// calls to itself.
type workers struct {
	max, maxIdle int

	mu      sync.Mutex
	pending []func() // calls asked for and not started, oldest first
	running int      // goroutines, busy or parked
	parked  int
	signal  chan struct{} // a call was added while some goroutine was parked
	quit    chan struct{} // closed by stop: parked goroutines return
	once    sync.Once
}

// maxIdleWorkers is how many goroutines per primary stay parked between
// calls.
const maxIdleWorkers = 4

// newWorkers returns the workers of a primary whose go-redis client has a
// pool of poolSize connections (0: go-redis's default, 10 per CPU).
func newWorkers(poolSize int) *workers {
	if poolSize <= 0 {
		poolSize = 10 * runtime.GOMAXPROCS(0)
	}
	return &workers{max: poolSize, maxIdle: min(maxIdleWorkers, poolSize), signal: make(chan struct{}, poolSize), quit: make(chan struct{})}
}

// run has f run on one of w's goroutines, after the calls asked for
// before it. It must not be called after stop.
func (w *workers) run(f func()) {
	w.mu.Lock()
	w.pending = append(w.pending, f)
	switch {
	case w.parked > 0:
		w.mu.Unlock()
		select {
		case w.signal <- struct{}{}:
		default: // as many signals wait as goroutines can park: one will take f
		}
	case w.running < w.max:
		w.running++
		w.mu.Unlock()
		go w.loop()
	default:
		w.mu.Unlock() // a busy goroutine takes it when its call ends
	}
}

// loop runs the pending calls, then parks (or returns, when enough are
// parked) until run signals more.
func (w *workers) loop() {
	for {
		w.mu.Lock()
		for len(w.pending) > 0 {
			f := w.pending[0]
			w.pending[0] = nil
			w.pending = w.pending[1:]
			w.mu.Unlock()
			f()
			w.mu.Lock()
		}
		if w.parked >= w.maxIdle {
			w.running--
			w.mu.Unlock()
			return
		}
		w.parked++
		w.mu.Unlock()
		select {
		case <-w.signal:
		case <-w.quit:
			w.mu.Lock()
			w.parked--
			w.running--
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		w.parked--
		w.mu.Unlock()
	}
}

// stop makes the parked goroutines return, and the others once they run
// out of calls. The caller ensures no call is pending or follows (the
// backend stops its workers once every call counted by b.bg has ended,
// and b.closed stops new ones).
func (w *workers) stop() { w.once.Do(func() { close(w.quit) }) }

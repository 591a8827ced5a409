package redlock

import "sync"

// workers runs the fan-out calls on reused goroutines. A call through
// go-redis runs deep enough that a fresh goroutine's stack grows (and is
// copied) a few times on every call; under contention that copying was a
// tenth of the Client's CPU. A goroutine that finished a call parks, up to
// maxIdleWorkers of them, and takes the next call.
type workers struct {
	idle chan chan func() // parked goroutines, each on its own channel (cap 1)
	quit chan struct{}    // closed by stop: parked goroutines return
	once sync.Once
}

// maxIdleWorkers bounds the goroutines kept parked per Client.
const maxIdleWorkers = 16

func newWorkers() *workers {
	return &workers{idle: make(chan chan func(), maxIdleWorkers), quit: make(chan struct{})}
}

// run runs f on a parked goroutine, or on a new one. It must not be
// called after stop.
func (w *workers) run(f func()) {
	select {
	case c := <-w.idle:
		c <- f // never blocks: cap 1, and the goroutine parked on it waits for it
	default:
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	c := make(chan func(), 1)
	for {
		f()
		select {
		case w.idle <- c:
		default:
			return // enough are parked
		}
		select {
		case f = <-c:
		case <-w.quit:
			return
		}
	}
}

// stop makes the parked goroutines return, and those still running
// return once they finish their call. The caller ensures no run is in
// progress or follows (the backend calls it once every call counted by
// b.bg has ended, and b.closed stops new ones).
func (w *workers) stop() { w.once.Do(func() { close(w.quit) }) }

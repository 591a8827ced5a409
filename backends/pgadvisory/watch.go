package pgadvisory

import (
	"sync"
	"time"
)

// watcher is one goroutine per backend, running only while leases are held,
// that sweeps the idle lease connections for ones the server has closed
// (lease.check). It sends nothing to the server.
type watcher struct {
	mu      sync.Mutex
	leases  map[*lease]struct{}
	running bool
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

// Sweep interval: watchBase, plus watchPerLease for each held lease (a peek
// costs about a microsecond), at most watchMax.
const (
	watchBase     = 25 * time.Millisecond
	watchPerLease = 10 * time.Microsecond
	watchMax      = time.Second
)

// lossSignal is the declared bound (Capabilities.LossSignal and
// BreakOverlap) on how soon a held lease whose session the server ended
// reports the loss: two sweeps, for up to a few thousand held leases.
const lossSignal = 2 * watchBase

func newWatcher() *watcher {
	return &watcher{leases: map[*lease]struct{}{}, stop: make(chan struct{})}
}

func (w *watcher) add(l *lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.leases[l] = struct{}{}
	if !w.running {
		w.running = true
		w.done = make(chan struct{})
		go w.loop(w.done)
	}
}

// len is the number of leases watched.
func (w *watcher) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.leases)
}

// list returns the leases watched.
func (w *watcher) list() []*lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	ls := make([]*lease, 0, len(w.leases))
	for l := range w.leases {
		ls = append(ls, l)
	}
	return ls
}

func (w *watcher) remove(l *lease) {
	w.mu.Lock()
	delete(w.leases, l)
	w.mu.Unlock()
}

// close stops the goroutine and returns the leases still held.
func (w *watcher) close() []*lease {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.stop)
	done := w.done
	ls := make([]*lease, 0, len(w.leases))
	for l := range w.leases {
		ls = append(ls, l)
	}
	w.mu.Unlock()
	if done != nil {
		<-done
	}
	return ls
}

func (w *watcher) loop(done chan struct{}) {
	defer close(done)
	t := time.NewTimer(watchBase)
	defer t.Stop()
	var batch []*lease
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		if len(w.leases) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		batch = batch[:0]
		for l := range w.leases {
			batch = append(batch, l)
		}
		w.mu.Unlock()
		for _, l := range batch {
			l.check()
		}
		clear(batch)
		t.Reset(min(watchBase+time.Duration(len(batch))*watchPerLease, watchMax))
	}
}

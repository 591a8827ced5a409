package pgadvisory

// Loss (internals; the package doc in doc.go has what users need).
//
// A lease reports loss (driver.LossNotifier) when its connection is found
// dead: by a renewal, by Release, or by one watcher goroutine per Client that
// sweeps the idle lease connections every 25 ms (longer with thousands of
// leases), with a non-blocking, non-consuming peek at each socket (a killed
// backend or the idle timeout sends a FATAL message and closes). The sweep
// sends nothing, so it never renews a lease behind its holder's back.
// Capabilities.LossSignal declares two sweeps (50 ms).
//
// A broken connection: the one place two holders can overlap (internals; the package doc in doc.go has what users need).
//
// PostgreSQL ties an advisory lock to its session, and ends the session
// the moment the server sees the session's connection close: a reset
// (a connection killed by a middlebox or a proxy, a client host that
// rebooted, a RST from a network fault). Its lock queue then grants the
// next waiter at once, 1–6 ms after the break as measured, whether or not
// the holder's side has noticed anything. The holder learns of it at the
// watcher's next sweep (or its next renewal or Release), so for up to one
// sweep, 25 ms, plus scheduling, both believe they hold the lock:
// `fencelock conformance` measures 5–25 ms (PartitionResetHolderEndsFirst).
// The backend declares this in Capabilities.BreakOverlap (50 ms), and the
// suite holds it to that bound. Fences still rise across the break, so a
// resource that checks them (package guard, or the transaction-scoped
// mode above, whose writes roll back with the broken session) refuses the
// old holder's writes; work guarded by the lock alone is not protected in
// that window. Every other backend keeps the stronger promise of
// Lease.ValidUntil (BreakOverlap 0): their stores end a lock by its TTL,
// not by a connection's end. A blackhole — a connection that stays open
// while nothing passes — is not such a case here: the server keeps the
// session until the lease's idle timeout, which runs out after the
// holder's ValidUntil.
//
// No sound fix exists without state outside the session. A waiter granted
// after a session ended cannot tell a COMMIT from a broken connection, nor
// how long the ended holder may still believe it holds: everything the
// session had (its locks, its settings, its entry in pg_stat_activity)
// ends with it, and a client-side fix that notices the break sooner cannot
// close the gap, since the server frees the lock whether or not the
// client ever notices. Keeping the promise needs a table that records,
// outside the lease's transaction, each holder's validity (written at
// every grant and renewal, cleared by Release), which every grant reads
// and waits out: DDL, and a committed write per renewal on a second
// connection. The backend does not require a table today (it works for any
// role that can connect, behind PgBouncer), so it declares the overlap
// instead.

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

package pgadvisory

import "sync"

// lossHooks is a lease's driver.LossNotifier: the functions registered
// with OnLost, each run once, in its own goroutine, when the lease is
// marked lost. It does what a context and context.AfterFunc would, with
// two allocations per registration instead of about seven per lease.
type lossHooks struct {
	mu    sync.Mutex
	lost  bool
	next  int
	hooks []lossHook
}

type lossHook struct {
	id int
	f  func()
}

// add registers f, or starts it now if the lease is already lost; stop
// unregisters it and reports whether that kept f from being started.
func (h *lossHooks) add(f func()) (stop func() bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost {
		go f()
		return func() bool { return false }
	}
	h.next++
	id := h.next
	h.hooks = append(h.hooks, lossHook{id: id, f: f})
	return func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for i, k := range h.hooks {
			if k.id == id {
				h.hooks = append(h.hooks[:i], h.hooks[i+1:]...)
				return true
			}
		}
		return false
	}
}

// mark marks the lease lost and starts every registered function, once.
func (h *lossHooks) mark() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost {
		return
	}
	h.lost = true
	for _, k := range h.hooks {
		go k.f()
	}
	h.hooks = nil
}

package dynamodb

import (
	"sync"
	"time"
)

// observation is what a Client saw of a lock held by someone else: the
// record version number, the item's lease duration, and the local
// monotonic time at which this Client first saw that version (the
// receipt of the read that returned it). The lock is free to take, with a
// write conditional on that exact version, once the version has stayed
// unchanged for the lease duration since then.
type observation struct {
	rvn   string
	lease time.Duration
	seen  time.Time
}

// expired reports whether the watched version has been unchanged for its
// whole lease duration at now.
func (o observation) expired(now time.Time) bool { return now.Sub(o.seen) >= o.lease }

// maxObservations bounds the memory of one Client: past it, observations
// older than their lease (stale anyway once re-read) are dropped first.
const maxObservations = 10000

// memory is the observation memory of one Client, shared by its blocked
// Acquires and later TryAcquires.
type memory struct {
	mu  sync.Mutex
	obs map[string]observation
}

func (m *memory) get(key string) (observation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.obs[key]
	return o, ok
}

// saw records that a read received at t found key held under rvn with
// the given lease duration, and returns the observation now in force: the
// earlier one if it watched the same version (its clock keeps running),
// else a new one starting at t.
func (m *memory) saw(key, rvn string, lease time.Duration, t time.Time) observation {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.obs[key]; ok && o.rvn == rvn {
		return o
	}
	if m.obs == nil {
		m.obs = map[string]observation{}
	}
	if len(m.obs) >= maxObservations {
		m.prune(t)
	}
	o := observation{rvn: rvn, lease: lease, seen: t}
	m.obs[key] = o
	return o
}

// forget drops what is known of key (it is free, or ours now).
func (m *memory) forget(key string) {
	m.mu.Lock()
	delete(m.obs, key)
	m.mu.Unlock()
}

// prune drops the observations whose lease has passed, or all if none
// has. Callers hold mu.
func (m *memory) prune(now time.Time) {
	n := len(m.obs)
	for k, o := range m.obs {
		if o.expired(now) {
			delete(m.obs, k)
		}
	}
	if len(m.obs) == n {
		clear(m.obs)
	}
}

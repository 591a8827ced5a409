package dynamodb

// Expiry by observation (internals; the package doc in doc.go has what users need).
//
// DynamoDB keeps no lease clock, and the clocks of the machines sharing a
// table are not trusted to agree, so expiry is decided by observation
// (Capabilities.TimeAuthority is TimeClient), as in the AWS Lock Client.
// Each Client remembers, per lock it found held, the record version and
// the local monotonic time at which it first read it (the receipt of the
// read, which is after the holder sent the write that made that version).
// Once the version has stayed unchanged for the item's leaseDuration from
// then, the Client may take the lock with a write conditional on that
// exact version; a heartbeat in between changes the version, and the
// write fails. The holder's local validity deadline runs from when it sent
// its last successful write, less drift, so it always ends before a
// waiter can have watched a full lease.
//
// The cost: an abandoned lock is taken a full lease duration after the
// waiter FIRST READ it, not after the holder's last heartbeat. A waiter
// that arrives late waits a whole lease; Lease.StoreTTL reports the
// bound (the TTL plus two poll intervals) for sizing such waits. A blocked
// Acquire keeps its observation between polls, and so does a later
// TryAcquire on the same Client (the memory is per Client, bounded to
// 10,000 locks).

import (
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
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

// maxObservations bounds the memory of one Client: past it, records with
// no queue entries and no unexpired lock observation are dropped first.
const maxObservations = 10000

// record is what a Client has seen of one lock: the observation of its
// holder (rvn "" when the last read found it free) and, for each entry of
// its wait queue, when this Client first saw that exact entry.
type record struct {
	lock   observation
	queue  []seenEntry
	handed bool // this Client handed the lock on (see Hand-off, atop queue.go)
}

type seenEntry struct {
	entry string
	seen  time.Time
}

// memory is the observation memory of one Client, shared by its blocked
// Acquires and later TryAcquires.
type memory struct {
	mu   sync.Mutex
	obs  map[string]record
	mine map[string]released // locks whose last version is this Client's release
}

// released is what a Client knows of a lock it released itself: the
// version its release wrote, and the fence, lease duration and label of
// the lease it released.
type released struct {
	rvn   string
	fence driver.Fence
	ttl   time.Duration
	label string
}

// released records r, written by this Client's release of key
// (bounded to maxObservations locks).
func (m *memory) released(key string, r released) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mine == nil || len(m.mine) >= maxObservations {
		m.mine = map[string]released{}
	}
	m.mine[key] = r
}

// takeReleased returns and forgets what released recorded of key: it
// serves one acquire write, whose outcome makes it stale either way.
func (m *memory) takeReleased(key string) (released, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.mine[key]
	if ok {
		delete(m.mine, key)
	}
	return r, ok
}

func (m *memory) get(key string) (observation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.obs[key]
	return r.lock, ok && r.lock.rvn != ""
}

// queued reports whether the last read of key by this Client found
// waiters in its queue, or this Client handed the lock on since.
func (m *memory) queued(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.obs[key]
	return len(r.queue) > 0 || r.handed
}

// handedOff records that this Client handed key on at t, writing version
// rvn with the given lease duration and leaving queue: as a read at t
// would have seen it (the write was applied before t), and marked so
// that queued reports true.
func (m *memory) handedOff(key, rvn string, lease time.Duration, queue []string, t time.Time) {
	m.saw(key, rvn, lease, queue, t)
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.obs[key]; ok {
		r.handed = true
		m.obs[key] = r
	}
}

// saw records that a read received at t found key held under rvn ("" if
// free) with the given lease duration, with queue as its wait queue. It
// returns the lock observation now in force (the earlier one if it watched
// the same version: its clock keeps running; else a new one starting at
// t) and, for each queue entry, when this Client first saw it.
func (m *memory) saw(key, rvn string, lease time.Duration, queue []string, t time.Time) (observation, []time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.obs[key]
	var r record
	if rvn != "" {
		r.lock = observation{rvn: rvn, lease: lease, seen: t}
		if old.lock.rvn == rvn {
			r.lock = old.lock
		}
	}
	seen := make([]time.Time, len(queue))
	for i, e := range queue {
		seen[i] = t
		for _, o := range old.queue {
			if o.entry == e {
				seen[i] = o.seen
				break
			}
		}
		r.queue = append(r.queue, seenEntry{e, seen[i]})
	}
	if rvn == "" && len(queue) == 0 {
		delete(m.obs, key)
		return r.lock, seen
	}
	if m.obs == nil {
		m.obs = map[string]record{}
	}
	if _, ok := m.obs[key]; !ok && len(m.obs) >= maxObservations {
		m.prune(t)
	}
	m.obs[key] = r
	return r.lock, seen
}

// forget drops what is known of key's holder (the lock is ours now); what
// was seen of its queue stays.
func (m *memory) forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.obs[key]
	if !ok {
		return
	}
	if len(r.queue) == 0 {
		delete(m.obs, key)
		return
	}
	r.lock = observation{}
	m.obs[key] = r
}

// prune drops the records without queue entries whose lock observation
// has passed its lease, or all if there is none. Callers hold mu.
func (m *memory) prune(now time.Time) {
	n := len(m.obs)
	for k, r := range m.obs {
		if len(r.queue) == 0 && r.lock.expired(now) {
			delete(m.obs, k)
		}
	}
	if len(m.obs) == n {
		clear(m.obs)
	}
}

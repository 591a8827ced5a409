package conformance

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
)

// leaseTable is the leases held now, per name, for the sample taken at
// each grant.
type leaseTable struct {
	mu     sync.Mutex
	byName map[string]map[int64]*liveLease
}

type liveLease struct {
	l         *fencelock.Lease
	releasing atomic.Bool // its holder called Release: it no longer believes it holds
}

func (t *leaseTable) add(name string, id int64, l *fencelock.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.byName[name]
	if m == nil {
		m = map[int64]*liveLease{}
		t.byName[name] = m
	}
	m[id] = &liveLease{l: l}
}

func (t *leaseTable) remove(name string, id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byName[name], id)
}

func (t *leaseTable) releasing(name string, id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ll := t.byName[name][id]; ll != nil {
		ll.releasing.Store(true)
	}
}

// held returns the leases on name whose holders believe they hold it now.
func (t *leaseTable) held(name string) []int64 {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []int64
	for id, ll := range t.byName[name] {
		if !ll.releasing.Load() && ll.l.Err() == nil && now.Before(ll.l.ValidUntil()) {
			ids = append(ids, id)
		}
	}
	return ids
}

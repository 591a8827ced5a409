package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Store is an in-memory lock table: the state every mem:// client on it
// shares, as processes share a real store. Safe for concurrent use.
// Locks expire on the process's monotonic clock; fences come from a
// per-name counter that release and expiry never reset.
type Store struct {
	mu     sync.Mutex
	locks  map[string]*entry
	fences map[string]driver.Fence
	freed  map[string]chan struct{} // closed (and dropped) when the name is freed
}

type entry struct {
	session Session
	token   string
	label   string
	fence   driver.Fence
	expires time.Time
	timer   *time.Timer
	// lost is cancelled when the store drops the lock (not on release); a
	// context so that the holder can watch it with context.AfterFunc,
	// without a goroutine per lease.
	lost context.Context
	lose context.CancelFunc
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{locks: map[string]*entry{}, fences: map[string]driver.Fence{}, freed: map[string]chan struct{}{}}
}

// Session identifies one mem:// client's locks in its Store (see
// KillSession). Get a client's with Client.As.
type Session uint64

// KillSession drops every lock held through session at once, as a store
// does when a client's session or connection dies: the leases report loss
// and waiters wake. It returns how many locks were dropped.
func (s *Store) KillSession(session Session) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for name, e := range s.locks {
		if e.session == session && session != 0 {
			s.drop(name, e)
			e.lose()
			n++
		}
	}
	return n
}

func (s *Store) tryAcquire(session Session, name, token, label string, ttl time.Duration) (driver.Fence, context.Context, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.locks[name]; e != nil {
		return 0, nil, driver.ErrNotAcquired
	}
	s.fences[name]++
	e := &entry{session: session, token: token, label: label, fence: s.fences[name], expires: time.Now().Add(ttl)}
	e.lost, e.lose = context.WithCancel(context.Background())
	e.timer = time.AfterFunc(ttl, func() { s.expireIfDue(name, e) })
	s.locks[name] = e
	return e.fence, e.lost, nil
}

// extend sets the lock's expiry to ttl from now if token still holds it.
func (s *Store) extend(name, token string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.locks[name]
	if e == nil || e.token != token {
		return fmt.Errorf("%w: %q is not held under this lease's token", driver.ErrLeaseLost, name)
	}
	e.expires = time.Now().Add(ttl)
	e.timer.Reset(ttl)
	return nil
}

// release frees the lock if token still holds it.
func (s *Store) release(name, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.locks[name]
	if e == nil || e.token != token {
		return fmt.Errorf("%w: %q is not held under this lease's token", driver.ErrLeaseLost, name)
	}
	s.drop(name, e)
	return nil
}

// Expire drops the lock on name at once, as if its TTL had passed: the
// holder's lease reports loss and waiters wake. It reports whether a lock
// was held.
func (s *Store) Expire(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.locks[name]
	if e == nil {
		return false
	}
	s.drop(name, e)
	e.lose()
	return true
}

// Holder returns the token and fence holding name, if any.
func (s *Store) Holder(name string) (token string, fence driver.Fence, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.locks[name]; e != nil {
		return e.token, e.fence, true
	}
	return "", 0, false
}

// Info is a lock's state in a Store (see Inspect).
type Info struct {
	Held      bool
	Label     string
	Fence     driver.Fence
	Remaining time.Duration
}

// Inspect reports name's holder: its label, fence and remaining TTL.
func (s *Store) Inspect(name string) Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.locks[name]
	if e == nil {
		return Info{}
	}
	return Info{Held: true, Label: e.label, Fence: e.fence, Remaining: max(time.Until(e.expires), time.Nanosecond)}
}

// setLabel changes the label stored with name if token still holds it.
func (s *Store) setLabel(name, token, label string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.locks[name]
	if e == nil || e.token != token {
		return fmt.Errorf("%w: %q is not held under this lease's token", driver.ErrLeaseLost, name)
	}
	e.label = label
	return nil
}

// wait returns nil as soon as name is free (at once if it is), or ctx's
// error.
func (s *Store) wait(ctx context.Context, name string) error {
	s.mu.Lock()
	if s.locks[name] == nil {
		s.mu.Unlock()
		return nil
	}
	ch := s.freed[name]
	if ch == nil {
		ch = make(chan struct{})
		s.freed[name] = ch
	}
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) expireIfDue(name string, e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locks[name] != e {
		return // released or replaced meanwhile
	}
	if rem := time.Until(e.expires); rem > 0 {
		e.timer.Reset(rem) // extended after the timer fired
		return
	}
	s.drop(name, e)
	e.lose()
}

// drop removes e and wakes waiters. Callers hold s.mu.
func (s *Store) drop(name string, e *entry) {
	e.timer.Stop()
	delete(s.locks, name)
	if ch := s.freed[name]; ch != nil {
		close(ch)
		delete(s.freed, name)
	}
}

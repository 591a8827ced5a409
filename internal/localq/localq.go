// Package localq queues the blocked acquires of one Client per lock name,
// in arrival order, so that only the first of them contends on the store:
// a release is then raced by one waiter per Client instead of all of
// them (fewer refused attempts loading the store), and a Client's waiters
// are served first come, first served.
package localq

import "sync"

// Queues holds one queue per lock name. The zero value is ready to use.
type Queues struct {
	mu     sync.Mutex
	m      map[string][]*Ticket
	closed bool
}

// Ticket is one waiter's place in its name's queue.
type Ticket struct {
	turn chan struct{} // closed when it is first in line
}

// Turn returns a channel closed when t is first in line.
func (t *Ticket) Turn() <-chan struct{} { return t.turn }

// Join appends a ticket to name's queue; the first in line has its turn at
// once. It returns false once Close was called.
func (q *Queues) Join(name string) (*Ticket, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, false
	}
	if q.m == nil {
		q.m = map[string][]*Ticket{}
	}
	t := &Ticket{turn: make(chan struct{})}
	l := q.m[name]
	if len(l) == 0 {
		close(t.turn)
	}
	q.m[name] = append(l, t)
	return t, true
}

// Leave removes t from name's queue and gives the turn to the next.
func (q *Queues) Leave(name string, t *Ticket) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.m[name]
	for i, x := range l {
		if x != t {
			continue
		}
		l = append(l[:i:i], l[i+1:]...)
		if i == 0 && len(l) > 0 {
			close(l[0].turn)
		}
		break
	}
	if len(l) == 0 {
		delete(q.m, name)
	} else {
		q.m[name] = l
	}
}

// Close makes later Joins fail; tickets already handed out stay valid.
func (q *Queues) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

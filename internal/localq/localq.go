// Package localq queues the blocked acquires of one Client per lock name,
// in arrival order, so that only the first of them contends on the store:
// a release is then raced by one waiter per Client instead of all of
// them (fewer refused attempts loading the store), and a Client's waiters
// are served first come, first served. The redis, redlock and dynamodb
// backends use it; each ticket carries a value of the backend's own
// (redlock's local hand-off state).
package localq

import "sync"

// Queues holds one queue per lock name. The zero value is ready to use.
type Queues[T any] struct {
	mu     sync.Mutex
	m      map[string][]*Ticket[T]
	closed bool
}

// Ticket is one waiter's place in its name's queue.
type Ticket[T any] struct {
	turn chan struct{} // closed when it is first in line
	// Val is the waiter's own state, set by Join.
	Val T
}

// Turn returns a channel closed when t is first in line.
func (t *Ticket[T]) Turn() <-chan struct{} { return t.turn }

// Join appends a ticket carrying v to name's queue; the first in line has
// its turn at once. It returns false once Close was called.
func (q *Queues[T]) Join(name string, v T) (*Ticket[T], bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, false
	}
	if q.m == nil {
		q.m = map[string][]*Ticket[T]{}
	}
	t := &Ticket[T]{turn: make(chan struct{}), Val: v}
	l := q.m[name]
	if len(l) == 0 {
		close(t.turn)
	}
	q.m[name] = append(l, t)
	return t, true
}

// Leave removes t from name's queue and gives the turn to the next. It
// reports whether the queue is empty now.
func (q *Queues[T]) Leave(name string, t *Ticket[T]) (empty bool) {
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
		return true
	}
	q.m[name] = l
	return false
}

// Head calls f with the first ticket in name's queue, if there is one,
// while no ticket can join or leave it, and reports whether it did.
func (q *Queues[T]) Head(name string, f func(*Ticket[T])) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.m[name]
	if len(l) == 0 {
		return false
	}
	f(l[0])
	return true
}

// Close makes later Joins fail; tickets already handed out stay valid.
func (q *Queues[T]) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

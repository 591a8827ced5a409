package redlock

// Timeouts (internals; the package doc in doc.go has what users need).
//
// Pass go-redis clients with ContextTimeoutEnabled (clients opened from a
// URL have it); every call to a primary also carries its own deadline (the
// validity of the TTL, at least one second, for an acquire; the ctx's
// deadline or 2 s for a release), because go-redis ends a call in flight
// at a deadline, not at a cancellation. A call that goes on after its
// operation was decided finishes in the background. An unreachable
// majority yields errors wrapping fencelock.ErrUnavailable; a ctx that ends
// mid-call yields an error wrapping ctx.Err(), after the attempt was
// abandoned.

import (
	"context"
	"sync/atomic"
	"time"
)

// reply is one primary's answer to one call of a fan-out.
type reply struct {
	i    int   // the primary's index
	a, b int64 // the script's values (meaning per script)
	err  error
}

// fan calls call on each primary in idx concurrently and returns a channel
// that receives one reply per primary. The channel is buffered, so the
// caller may stop reading once it has decided: the remaining calls finish
// in the background (counted by b.bg, which Close and the tests wait for).
//
// Each call runs on a context detached from the caller's cancellation and
// bounded by deadline and by Close: a caller that stops waiting does not
// cut a request in half (go-redis observes deadlines, not cancellation,
// during a read), and a frozen primary holds a goroutine at most until
// deadline.
func (b *backend) fan(deadline time.Time, idx []int, call func(ctx context.Context, i int) (int64, int64, error)) <-chan reply {
	ch := make(chan reply, len(idx))
	b.fanInto(ch, deadline, idx, call)
	return ch
}

// fanInto is fan sending the replies to ch, which must have room for them
// (an acquire fans out in two steps to one channel: see try).
func (b *backend) fanInto(ch chan<- reply, deadline time.Time, idx []int, call func(ctx context.Context, i int) (int64, int64, error)) {
	if !b.goAdd(len(idx)) {
		for _, i := range idx {
			ch <- reply{i: i, err: errClosed}
		}
		return
	}
	ctx, cancel := context.WithDeadline(b.ctx, deadline)
	var left atomic.Int32
	left.Store(int32(len(idx)))
	finish := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	for _, i := range idx {
		b.nodes[i].workers.run(func() {
			defer b.bg.Done()
			a, v, err := call(ctx, i)
			ch <- reply{i: i, a: a, b: v, err: err}
			finish()
		})
	}
	if len(idx) == 0 {
		cancel()
	}
}

// goAdd counts n background calls, unless the backend is closed.
func (b *backend) goAdd(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.bg.Add(n)
	return true
}

// deadlineOf is ctx's deadline, or now+d if it has none.
func deadlineOf(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(d)
}

// all returns the indexes 0..n-1.
func all(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// What an acquire attempt knows about one primary. Set by the call's
// goroutine when its reply arrives (possibly after the attempt decided),
// read by Release, Extend and the abandon of a failed attempt.
const (
	statePending int32 = iota // no reply yet
	stateGranted              // granted under our token
	stateRefused              // definitively not granted (held, voided, error reply)
	stateNotSent              // the request never reached the primary
	stateUnknown              // sent, but the reply was lost: may have been granted
)

// attempt is one acquire attempt's per-primary states.
type attempt struct {
	states []atomic.Int32
}

func newAttempt(n int) *attempt { return &attempt{states: make([]atomic.Int32, n)} }

func (at *attempt) state(i int) int32 { return at.states[i].Load() }

// mayHold reports whether primary i may hold our token: granted, or the
// outcome is not known.
func (at *attempt) mayHold(i int) bool {
	s := at.state(i)
	return s == stateGranted || s == statePending || s == stateUnknown
}

// uncertain reports whether the acquire request to primary i may still
// run later (no reply came): a release there must also void the token.
func (at *attempt) uncertain(i int) bool {
	s := at.state(i)
	return s == statePending || s == stateUnknown
}

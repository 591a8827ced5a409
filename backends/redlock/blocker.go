package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/localq"
)

var _ driver.Blocker = (*backend)(nil)

// Acquire implements driver.Blocker: the portable Client's blocking
// Acquire calls it instead of polling TryAcquire.
//
// The blocked acquires of one Client on one lock queue up locally, in
// arrival order, and only the first of them makes attempts on the
// primaries; the others send nothing until it is granted or gives up. So
// every Client puts at most one contender per lock on the primaries: a
// release is contended by one waiter per Client instead of all of them,
// which keeps the primaries' votes from splitting (see Waiting,
// atop waiter.go) and bounds how long a waiter can be passed over. Between
// Clients, the lead primary's queue orders the waiters (see try and the
// Waiting atop waiter.go; Capabilities.FIFO is false all the same).
//
// The first waiter retries after a release notice (Wait), or when its
// refused attempt said the holder's keys run out (see freeAt), bounded by
// req.Backoff (the Client's Options.Backoff). Every attempt has a fresh token:
// an abandoned attempt's token is void on the primaries. ErrUnavailable
// and other errors end the wait, as in the portable loop.
func (b *backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Lease, time.Time, error) {
	t, err := b.join(req.Name)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer b.leave(req.Name, t)
	select {
	case <-t.Turn():
	case <-ctx.Done():
		return nil, time.Time{}, ctxErr(ctx, "acquire", "queued behind this Client's earlier waiters")
	case <-b.ctx.Done():
		return nil, time.Time{}, errClosed
	}
	timedOut := false // the last wait ended by its backoff, without a notice
	wasNamed := false // the last wait ended with the lead's notice naming t.Val.id: the next attempt is named
	gone := ""        // the token of the lease handed off to t.Val.id, from that notice (see Hand-off in lease.go)
	leadHeld := false // the last attempt was refused by the lead, first in its queue, for the lock held there
	queued := false   // the lead may queue t.Val.id
	defer func() {
		if queued {
			b.dequeue(req.Name, t.Val.id)
		}
	}()
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			req.Token = driver.NewToken()
		}
		// A retry asks the lead primary first (see try), and so does the
		// first attempt when this Client's last Acquire of the lock had to
		// wait: other Clients probably wait too, and a plain fan-out
		// would split the votes with them and jump the lead's queue. Else
		// the first attempt fans out at once, as TryAcquire does. When the
		// lead refused the first in its queue (the lock is held there) and
		// then no notice came, the lock may be free on a majority while
		// the lead stays held (a minority's stale key): only a plain
		// fan-out can tell, and it passes nobody queued.
		mode := plain
		switch {
		case wasNamed:
			mode = named
		case (attempt > 0 || b.rivalsOn(req.Name)) && !(timedOut && leadHeld):
			mode = ordered
		}
		if mode != named {
			gone = ""
		}
		l, sent, err := b.try(ctx, req, t.Val.id, mode, gone)
		queued = true
		if err == nil {
			queued = false // the release takes t.Val.id out of the lead's queue
			b.granted(req.Name, t.Val, attempt > 0)
			return l, sent, nil
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			return nil, time.Time{}, err
		}
		leadHeld = errors.Is(err, errLeadHeld)
		if ctx.Err() != nil {
			return nil, time.Time{}, ctxErr(ctx, "acquire", "waiting for the lock")
		}
		leadRefused := leadHeld || errors.Is(err, errBehind) || errors.Is(err, errQueued)
		wctx, cancel := context.WithTimeout(ctx, waitBound(req, attempt, err, leadRefused))
		werr := b.wait(wctx, req.Name, t.Val.id, leadRefused, t.Val.kick)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, time.Time{}, ctxErr(ctx, "acquire", "waiting for the lock")
		case errors.Is(werr, driver.ErrClosed):
			return nil, time.Time{}, errClosed
		}
		timedOut = werr != nil && wctx.Err() != nil
		wasNamed, gone = false, ""
		if werr == nil {
			wasNamed, gone = b.namedSince(req.Name, t.Val.id)
		}
	}
}

// waitBound is how long a blocked Acquire waits at most after its
// attempt-th attempt was refused with err (leadRefused: by the lead
// primary). The refusal may say when the lock is free (a holder's keys
// run out: expiry publishes nothing); the wait ends then at the latest.
// A waiter the lead refused is woken by the lead's notice naming it (see
// waitLead): its backoff is only a safety net, so it polls at leadPoll
// rather than at the backoff's first, short steps, which would send every
// queued waiter to the lead a few times per grant.
func waitBound(req driver.AcquireRequest, attempt int, err error, leadRefused bool) time.Duration {
	d := req.Backoff(attempt)
	if leadRefused {
		d = leadPoll + rand.N(leadPoll/4)
	}
	if at, ok := retryAt(err); ok {
		d = min(d, time.Until(at))
	}
	return d
}

// ticket is what a blocked Acquire keeps with its place in its Client's
// local queue (b.queues).
type ticket struct {
	kick   chan struct{} // cap 1: a lease of this Client on the lock was just released
	kicked bool          // a kick was sent to it (under b.mu)
	id     string        // its place in the lead primary's queue (see try)
}

// leadPoll is how long a blocked Acquire that the lead primary refused
// waits at most for a notice naming it (plus up to a quarter more, at
// random, so that the queued waiters do not poll in step), unless the
// refusal said when the lock or the place ahead frees sooner.
const leadPoll = 40 * time.Millisecond

// maxStreak is how many hand-offs in a row a Client may make to its own
// next waiter (see handOff).
const maxStreak = 3

// handOff is called when a lease of this Client on name was released
// (by a majority). If another Acquire of this Client waits for name, it is
// told at once instead of through the primaries' release notices, so it
// retries about a round trip before the other Clients' waiters: a local
// hand-off, as cheap as an uncontended acquire. To keep the other Clients
// from starving, a Client makes at most maxStreak such hand-offs in a
// row; then its next waiter races the others on the notices like them.
func (b *backend) handOff(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queues.Head(name, func(h *localq.Ticket[*ticket]) {
		if b.streaks[name] >= maxStreak {
			delete(b.streaks, name)
			return
		}
		b.streaks[name]++
		h.Val.kicked = true
		select {
		case h.Val.kick <- struct{}{}:
		default:
		}
	})
}

// granted ends a streak of local hand-offs when t got the lock without one,
// and records whether it had to wait (see rivalsOn).
func (b *backend) granted(name string, t *ticket, waited bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !t.kicked {
		delete(b.streaks, name)
	}
	switch {
	case !waited:
		delete(b.rivals, name)
	case len(b.rivals) >= maxSnaps:
		clear(b.rivals) // names contended once and never again: forget them
		fallthrough
	default:
		b.rivals[name] = true
	}
}

// rivalsOn reports whether this Client's last blocked Acquire of name had
// to wait for other holders.
func (b *backend) rivalsOn(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rivals[name]
}

// join appends a ticket to name's local queue; the first in line gets
// its turn at once.
func (b *backend) join(name string) (*localq.Ticket[*ticket], error) {
	id := b.waitID + "." + strconv.FormatUint(b.waitSeq.Add(1), 36)
	t, ok := b.queues.Join(name, &ticket{kick: make(chan struct{}, 1), id: id})
	if !ok {
		return nil, errClosed
	}
	return t, nil
}

// leave removes t from name's queue and gives the turn to the next; a
// streak of local hand-offs ends with the queue.
func (b *backend) leave(name string, t *localq.Ticket[*ticket]) {
	if b.queues.Leave(name, t) {
		b.mu.Lock()
		delete(b.streaks, name)
		b.mu.Unlock()
	}
}

// dequeue takes the blocked Acquire id out of the lead primary's queue of
// name, in the background: a place left there would hold the other
// waiters up until queueKeep after its last attempt.
func (b *backend) dequeue(name, id string) {
	k := keysFor(name)
	b.fan(time.Now().Add(cleanupTimeout), []int{lead}, func(ctx context.Context, i int) (int64, int64, error) {
		_, err := b.nodes[i].c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.ZRem(ctx, k.queue, id)
			p.HDel(ctx, k.queueDL, id)
			return nil
		})
		return 0, 0, err
	})
}

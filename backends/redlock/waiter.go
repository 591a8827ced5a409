package redlock

// Waiting (internals; the package doc in doc.go has what users need).
//
// A blocked Acquire is woken by the release notices (Capabilities.Wait is
// WaitNotify). The Client keeps one pub/sub connection per primary, shared
// by all its waiters, subscribed to the channels of the locks they wait
// for (a lock's channel while they wait, or 200 ms more while the lead is
// slow; the Client's own channel on the lead, below, 2 s more). A
// waiter subscribes on every primary and waits until a majority confirm;
// then, unless a majority of those subscriptions were already confirmed
// when its failed attempt began and have carried no notice since, it
// checks the lock keys, so a release between its attempt and its
// subscription is not missed (a release frees a majority, which meets the
// confirmed one). Expiry publishes nothing, nor does redsync: a waiter
// also wakes when enough of the holder's keys run out to free a majority,
// by the PTTLs the primaries returned to its refused attempt (for an
// ordered attempt, the lead's key, or the place ahead of it in the lead's
// queue), and a backoff bounds every wait: leadPoll after a refusal by
// the lead (below), else the Client's Options.Backoff. A dead or
// frozen primary is not needed to wait.
//
// Capabilities declare ReleaseWake and ExpiryWake of 100 ms: a waiter is
// granted about a round trip after a Release (the notice) or after an
// abandoned holder's keys run out (the PTTL), however long its Client's
// Options.Backoff and however often it waited before; the bounds leave
// room for a busy machine. TestExpiryWakesWaiterBehindQueuedHolder and
// the conformance checks ExpiryWakesWaiter, ReleaseWakesDeafBackoff and
// PartitionLiveness hold the backend to them.
//
// Blocked Acquires of different Clients queue on the lead primary (the
// first one given to New or in the URL), in the order they first found
// the lock held there. A blocked Acquire's retry is ordered: it asks the
// lead first, and the lead grants only the first waiter in its queue
// (waiters behind it are refused at once, holding nothing); only once the
// lead granted does the waiter ask the other primaries. So the waiters
// woken by a release do not split the primaries' votes (each taking a few,
// none a majority, all abandoning and backing off, which is what makes
// plain Redlock crawl and starve waiters under contention), and the lock
// goes round the waiting Clients in arrival order. This only orders the
// requests: a grant still needs a majority within the validity, and the
// fence and every other guarantee are as above. When the lead fails, or
// has not answered within min(250 ms, validity/4) (25 ms once it failed to
// answer in time: see leadWait), the other primaries are asked at once and
// the lead's reply counts like theirs.
//
// A release wakes only the next waiter. The lead's release names the
// first live waiter in its queue (release.lua): on the lock's channel,
// and on that waiter's Client's own channel on the lead (keys.own; a
// waiter id is its Client's id, a dot and a number). A contended lease's
// release that hands the lock to that waiter (see Hand-off in lease.go)
// publishes on the lead alone; a waiter that misses the notice finds the
// lock at its next attempt (within leadPoll after a refusal by the lead,
// else its backoff; its own channel, confirmed, rarely misses it). A
// waiter whose last attempt the lead refused, for the lock held there
// or for earlier waiters queued there, waits on its Client's own channel
// alone (waitLead): it wakes for a notice naming it, an untargeted one, its
// Client's kick (see handOff), or after leadPoll (40–50 ms, a safety net
// whatever Options.Backoff is), earlier if the refusal said when the lock
// or the place ahead frees. The others sleep through the release, and
// their Clients receive nothing: the lock's channel is subscribed only
// while some waiter waits on every primary (after a refusal that was not
// the lead's, or while its own channel is not yet confirmed), and no
// longer. The named waiter retries with a named attempt: every
// primary at once, the lead's queue consulted and its verdict awaited
// (as an ordered attempt waits for it), its refusal ending the attempt; so the
// hand-off takes one round trip after the notice and passes nobody.
// Before, every release woke every waiter of every Client and each asked
// the lead, all but one to be refused: under 8-way contention on five
// primaries about 20 script calls and 40 pub/sub messages per grant,
// against about 11 calls (the release and the named attempt on each
// primary, and the next Acquire joining the lead's queue) and one message
// then, and about 7 calls now that the release hands the lock off (the
// release on the lead alone: see Hand-off in lease.go).
//
// A waiter the lead granted keeps the head of the queue (nobody passes it
// if its attempt then fails elsewhere: the abandon keeps its place) until
// its lease's release takes it out, in the script that deletes the lock
// key there, or until its lock key there expires, or 500 ms after the
// grant if that comes first: a holder that stops renewing holds the queue
// up no longer than its lock. A waiter keeps its place for 500 ms after
// each of its attempts (every live waiter the lead refused asks again
// well within that: its wait is bounded by leadPoll); one that gives up takes it out, and
// one that died holds the queue up for at most 500 ms. The first attempt of a blocked Acquire is a plain
// fan-out, as TryAcquire is (so an uncontended Acquire costs one round
// trip; the lead still queues it if the lock is held there), unless this
// Client's previous Acquire of the lock had to wait; and the first waiter
// in line makes a plain attempt after a wait that saw no notice, in case
// the lead alone keeps a stale key while a majority is free. TryAcquire
// ignores the queue.
//
// The blocked Acquires of one Client on one lock queue up locally in
// arrival order, and only the first makes attempts, so each Client puts
// one contender per lock on the primaries. When a lease of the Client is
// released and another of its Acquires waits, that one is told at once
// rather than through the notices (a local hand-off); its attempt is
// ordered or plain by the rules above, so it does not pass other Clients'
// waiters queued on the lead. After 3 such hand-offs in a row the next
// one waits for the notices like the others. Capabilities.FIFO stays
// false: the order is kept only while the lead primary answers, and
// TryAcquire and an Acquire's first, plain attempt are not queued.

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redisx"
)

// wait returns nil when the lock named name
// may be free: a release notice arrived from any primary, a majority of
// primaries had no lock key when checked, or enough of the holder's keys
// ran out (by their PTTLs) to leave a majority free. It returns ctx.Err()
// when ctx ends first, and ErrClosed when the backend closes.
//
// It subscribes on every primary through that primary's one shared pub/sub
// connection and waits until a majority of them confirm (the reply to a
// PING sent after the SUBSCRIBE; a channel already confirmed for an
// earlier waiter needs none). A release after Wait was called is then not
// missed: a release frees a majority of primaries and publishes on each,
// and any majority meets the confirmed one. A release between this
// Client's last attempt and the subscription is caught in one of two
// ways. If a majority of the subscriptions were already confirmed when
// that attempt started and have carried no notice since, there was no
// such release (it would have published on one of them), and Wait just
// waits. Otherwise it checks the lock keys (PTTL) on every primary. A
// frozen or dead primary never confirms and is simply not needed. It also
// returns nil when kick receives (see handOff). Blocked Acquires use it
// (blocker.go).
//
// id is the waiter's id in the lead primary's queue. leadOnly says that
// the waiter's last attempt was refused by the lead (see waitLead).
func (b *backend) wait(ctx context.Context, name, id string, leadOnly bool, kick <-chan struct{}) error {
	if g := b.inFlight(name); g != nil {
		// This Client's own attempt decides first (see gate).
		select {
		case <-g.done:
			if !g.won {
				return nil // it failed: the lock may be free
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-b.ctx.Done():
			return driver.ErrClosed
		}
	}
	k := keysFor(name)
	if leadOnly {
		if done, err := b.waitLead(ctx, k, id, kick); done {
			return err
		}
	}
	n, q := len(b.nodes), b.quorum
	wake := make(chan struct{}, 1)
	pongs := make(chan struct{}, n)
	// This Client's own channel on the lead, so that the next waitLead
	// finds it confirmed. Its confirmation is not counted below.
	own := &waiter{channel: k.own(b.waitID), id: id, own: true, wake: wake, pong: make(chan struct{}, 1)}
	if err := b.nodes[lead].hub.register(own); err != nil {
		return err
	}
	defer b.nodes[lead].hub.leave(own)
	keep := b.leadSlow.Load()
	for _, nd := range b.nodes {
		w := &waiter{channel: k.channel, id: id, keep: keep, wake: wake, pong: pongs}
		if err := nd.hub.register(w); err != nil {
			return err
		}
		defer nd.hub.leave(w)
	}
	for confirmed := 0; confirmed < n-q+1; {
		select {
		case <-pongs:
			confirmed++
		case <-wake:
			return nil
		case <-kick:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-b.ctx.Done():
			return driver.ErrClosed
		}
	}
	if snap := b.lastSnap(name); snap != nil {
		quiet := 0
		for i, nd := range b.nodes {
			cur := nd.hub.state(k.channel, id)
			switch {
			case !snap[i].confirmed || cur.id != snap[i].id:
			case cur.noticedSince(snap[i]):
				return nil // a notice (or a broken connection) since the attempt began
			case cur.confirmed:
				quiet++
			}
		}
		if quiet >= n-q+1 {
			select {
			case <-wake:
				return nil
			case <-kick:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-b.ctx.Done():
				return driver.ErrClosed
			}
		}
	}
	return b.checkKeys(ctx, k, wake, kick)
}

// waitLead is the wait of a waiter whose last attempt the lead primary
// refused, for the lock held there or for earlier waiters queued there:
// the lead decides the next grant, and its release notice names the one
// waiter it will grant (release.lua), so only that waiter needs to wake.
// The others keep their place in the lead's queue and wait on the lead's
// subscription alone, for a notice naming them, an untargeted notice, a
// kick, or their backoff; their Clients do not read the other
// primaries' notices, nor attempt on every release.
//
// This needs the lead's subscription to have been confirmed since before
// the refused attempt began (so no release since then went unseen): when
// it was not, waitLead returns done=false and the caller waits on every
// primary. A release the lead missed (its releaser could not reach it)
// leaves the lead's key in place: the refusal said when it runs out
// (freeAt) and the backoff bounds the wait, after which the waiter
// attempts on every primary (see Acquire in blocker.go).
func (b *backend) waitLead(ctx context.Context, k keys, id string, kick <-chan struct{}) (done bool, err error) {
	snap := b.lastSnap(k.lock)
	if snap == nil || !snap[len(b.nodes)].confirmed {
		return false, nil
	}
	own := snap[len(b.nodes)]
	h := b.nodes[lead].hub
	wake := make(chan struct{}, 1)
	w := &waiter{channel: k.own(b.waitID), id: id, own: true, wake: wake, pong: make(chan struct{}, 1)}
	if err := h.register(w); err != nil {
		return true, err
	}
	defer h.leave(w)
	switch cur := h.state(w.channel, id); {
	case !cur.confirmed || cur.id != own.id:
		return false, nil
	case cur.noticedSince(own):
		return true, nil
	}
	select {
	case <-wake:
		return true, nil
	case <-kick:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	case <-b.ctx.Done():
		return true, driver.ErrClosed
	}
}

// namedSince reports whether the lead primary's notice named waiter id
// since the snapshot before its last attempt on name, and the token of
// the lease that notice handed off to it, if any (see Hand-off in
// lease.go).
func (b *backend) namedSince(name, id string) (named bool, gone string) {
	snap := b.lastSnap(name)
	if snap == nil {
		return false, ""
	}
	own := snap[len(b.nodes)]
	cur := b.nodes[lead].hub.state(keysFor(name).own(b.waitID), id)
	if cur.id != own.id || cur.named == own.named {
		return false, ""
	}
	return true, cur.gone
}

// checkKeys is the end of a wait whose subscriptions are new: it reads the
// lock key's PTTL on every primary, returns nil at once if a majority has
// none, else waits for a notice, kick, or the time when enough of the
// holder's keys run out to leave a majority free.
func (b *backend) checkKeys(ctx context.Context, k keys, wake <-chan struct{}, kick <-chan struct{}) error {
	n, q := len(b.nodes), b.quorum
	replies := b.fan(deadlineOf(ctx, time.Minute), all(n), func(ctx context.Context, i int) (int64, int64, error) {
		d, err := b.nodes[i].c.PTTL(ctx, k.lock).Result()
		if d < 0 {
			return int64(d), 0, err // -2 (no key) and -1 (no expiry) come back as durations of -2 and -1ns
		}
		return d.Milliseconds(), 0, err
	})
	free := 0
	var ends []time.Time // when each held key runs out
	var timer *time.Timer
	var expired <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case r := <-replies:
			switch {
			case r.err != nil: // unknown: not counted either way
			case r.a == -2:
				free++
			case r.a >= 0:
				ends = append(ends, time.Now().Add(time.Duration(r.a)*time.Millisecond))
			}
			if free >= q {
				return nil
			}
			if need := q - free; len(ends) >= need {
				slices.SortFunc(ends, func(x, y time.Time) int { return x.Compare(y) })
				d := time.Until(ends[need-1])
				if timer == nil {
					timer = time.NewTimer(d)
					expired = timer.C
				} else {
					timer.Reset(d)
				}
			}
		case <-wake:
			return nil
		case <-kick:
			return nil
		case <-expired:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-b.ctx.Done():
			return driver.ErrClosed
		}
	}
}

// chanSnap is what a hub knew of one channel, for one waiter, at a moment.
type chanSnap struct {
	id        uint64 // the subscription's identity (0: not subscribed)
	msgs      uint64 // untargeted notices received (and connection breaks) so far
	named     uint64 // notices naming the waiter so far
	confirmed bool   // the server confirmed the subscription
	gone      string // the token the last notice naming the waiter handed off, if any
}

// noticedSince reports whether a notice for the waiter (an untargeted one,
// one naming it, or a connection break) came between prev and s.
func (s chanSnap) noticedSince(prev chanSnap) bool {
	return s.msgs != prev.msgs || s.named != prev.named
}

// snapshot records, before an attempt on k by waiter id ("" for a
// TryAcquire), what every primary's hub knows of k's channel, and (last)
// what the lead's knows of this Client's own channel, for the next Wait
// on it (see Wait).
func (b *backend) snapshot(k keys, id string) {
	snap := make([]chanSnap, len(b.nodes)+1)
	for i, nd := range b.nodes {
		snap[i] = nd.hub.state(k.channel, id)
	}
	snap[len(b.nodes)] = b.nodes[lead].hub.state(k.own(b.waitID), id)
	b.mu.Lock()
	if len(b.snaps) >= maxSnaps {
		clear(b.snaps) // names tried once and never again: forget them
	}
	b.snaps[k.lock] = snap
	b.mu.Unlock()
}

// maxSnaps bounds the snapshots kept (one per lock with a failed attempt).
const maxSnaps = 4096

func (b *backend) lastSnap(name string) []chanSnap {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.snaps[name]
}

// hub is one primary's pub/sub subscription, shared by all the client's
// waiters: one connection and two goroutines per primary, however many
// waiters. It is started by the first Wait and stopped by close. (The
// redis backend's hub, adapted: a broken connection here does not wake
// every waiter, because the other primaries still deliver notices; a dead
// primary would otherwise turn every wait into a busy loop.)
//
// The writer goroutine sends SUBSCRIBE, UNSUBSCRIBE and PING in the order
// waiters asked for them, so that a waiter's PING reply proves its
// channel's subscription is in effect on the server; the dispatcher
// goroutine reads replies and messages and wakes waiters.
type hub struct {
	client *goredis.Client
	self   string // the message of this backend's own abandons: ignored

	mu     sync.Mutex
	closed bool
	sub    *redisx.Sub           // the subscription connection, from the first wait on
	chans  map[string]*chanState // subscribed channels
	pings  map[string]*waiter    // PING payload → waiter
	seq    uint64
}

// chanState is one subscribed channel. It stays subscribed for linger
// after its last waiter leaves, so that the next waiter finds it confirmed.
type chanState struct {
	id        uint64
	waiters   map[*waiter]struct{}
	confirmed bool
	msgs      uint64            // untargeted notices and connection breaks
	named     map[string]uint64 // waiter id → notices naming it (at most maxNamed ids)
	gone      [2]string         // the last notice that handed a lease off: {waiter id, token}
	idleSince time.Time         // when its last waiter left; zero while it has waiters
	linger    time.Duration     // how long it stays subscribed without waiters, if it does (see leave)
}

// maxNamed bounds chanState.named: when it is full it is cleared and
// counted as an untargeted notice (every waiter looks again once).
const maxNamed = 256

// linger is how long a Client's own channel (see waitLead) stays
// subscribed on the lead without waiters; it carries only the notices
// naming the Client's waiters. A lock's release channel carries every
// release's notice from every primary to every subscribed Client, so
// under contention a subscription kept for nothing costs a message per
// grant and primary, while a waiter that the lead refused waits on its
// own channel alone: only the rare wait on every primary subscribes it
// (its own channel not yet confirmed, a refusal by another primary). It
// is unsubscribed as soon as its last waiter leaves, unless the lead was
// slow to answer (backend.leadSlow) when that waiter began: then every
// wait is on every primary, and the channel stays for sharedLinger, so
// that the next wait finds it confirmed and, if no notice came since its
// attempt began, need not check the lock keys. The hub looks every
// sweepEvery. With a 200 ms linger whatever the lead did, the 8-way
// contended benchmark's Clients received about 5 notices per grant on the
// lock's channels, with 25 ms about 1.4.
const (
	linger       = 2 * time.Second
	sharedLinger = 200 * time.Millisecond
	sweepEvery   = 100 * time.Millisecond
)

// waiter is one Wait call's registration on one primary. wake and pong are
// shared by the call's registrations on every primary.
type waiter struct {
	channel string
	id      string // the waiter's id in the lead's queue: a notice naming another waiter does not wake it
	own     bool   // channel is the Client's own (see keys.own)
	keep    bool   // a lock's release channel lingers after this waiter leaves (see sharedLinger)
	ping    string
	pong    chan struct{} // one send when our PING's reply arrives (cap: number of primaries)
	wake    chan struct{} // cap 1: a release was published
}

func newHub(client *goredis.Client, self string) *hub {
	return &hub{
		client: client,
		self:   self,
		chans:  map[string]*chanState{},
		pings:  map[string]*waiter{},
	}
}

// register adds w, queueing a SUBSCRIBE for a channel nobody waited on,
// then a PING; it starts the hub on first use.
func (h *hub) register(w *waiter) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return driver.ErrClosed
	}
	if h.sub == nil {
		h.sub = redisx.NewSub(h.client, redisx.Handlers{Message: h.message, Pong: h.pong, Broken: h.broken, Tick: h.sweep, TickEvery: sweepEvery})
	}
	cs := h.chans[w.channel]
	if cs == nil {
		h.seq++
		cs = &chanState{id: h.seq, waiters: map[*waiter]struct{}{}, linger: sharedLinger}
		if w.own {
			cs.linger = linger
		}
		h.chans[w.channel] = cs
		h.sub.Subscribe(w.channel)
	}
	cs.waiters[w] = struct{}{}
	cs.idleSince = time.Time{}
	if cs.confirmed {
		select {
		case w.pong <- struct{}{}:
		default:
		}
		return nil
	}
	h.seq++
	w.ping = "fencelock:" + strconv.FormatUint(h.seq, 36)
	h.pings[w.ping] = w
	h.sub.Ping(w.ping)
	return nil
}

// state returns what the hub knows of channel now, for waiter id.
func (h *hub) state(channel, id string) chanSnap {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.chans[channel]
	if cs == nil {
		return chanSnap{}
	}
	s := chanSnap{id: cs.id, msgs: cs.msgs, named: cs.named[id], confirmed: cs.confirmed}
	if cs.gone[0] == id {
		s.gone = cs.gone[1]
	}
	return s
}

// leave removes w. A channel left without waiters stays subscribed for
// its linger (see sweep), unless it is a lock's release channel and w
// does not keep it: then it is unsubscribed now.
func (h *hub) leave(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.pings, w.ping)
	if cs := h.chans[w.channel]; cs != nil {
		delete(cs.waiters, w)
		switch {
		case len(cs.waiters) > 0:
		case w.own || w.keep:
			cs.idleSince = time.Now()
		default:
			delete(h.chans, w.channel)
			h.sub.Unsubscribe(w.channel)
		}
	}
}

// sweep unsubscribes the channels idle for longer than linger.
func (h *hub) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch, cs := range h.chans {
		if len(cs.waiters) == 0 && !cs.idleSince.IsZero() && time.Since(cs.idleSince) > cs.linger {
			delete(h.chans, ch)
			h.sub.Unsubscribe(ch)
		}
	}
}

// message handles a message on a subscribed channel: a release notice
// wakes the channel's waiters, or only the one it names (the lead's
// release names the next waiter in its queue: release.lua). This Client's
// own abandons free nothing another holder held: they neither wake its
// waiters nor count as notices.
func (h *hub) message(ch, payload string) {
	if payload != h.self {
		_, head, _ := strings.Cut(payload, "\n")
		head, gone, _ := strings.Cut(head, "\n")
		h.wakeChannel(ch, head, gone)
	}
}

// wakeChannel wakes the waiters on ch: every one, or (head not empty)
// those with id head, to whom the notice handed the lease of token gone
// if not "".
func (h *hub) wakeChannel(ch, head, gone string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.chans[ch]
	if cs == nil {
		return
	}
	switch {
	case head == "":
		cs.msgs++
	case len(cs.named) >= maxNamed || cs.named == nil:
		if cs.named != nil {
			cs.msgs++ // the counts are forgotten: every waiter looks again
		}
		cs.named = map[string]uint64{head: 1}
	default:
		cs.named[head]++
	}
	if head != "" {
		cs.gone = [2]string{head, gone}
	}
	for w := range cs.waiters {
		if head != "" && w.id != head {
			continue
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// broken records that the connection broke: notices may have been lost,
// and every subscription must be confirmed again. Its waiters are woken
// to look again (a PING of theirs may have been lost with it).
func (h *hub) broken() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cs := range h.chans {
		cs.msgs++
		cs.confirmed = false
		for w := range cs.waiters {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (h *hub) pong(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.pings[payload]
	if w == nil {
		return
	}
	delete(h.pings, payload)
	if cs := h.chans[w.channel]; cs != nil {
		cs.confirmed = true
	}
	select {
	case w.pong <- struct{}{}:
	default:
	}
}

// close stops the hub's goroutines and closes its connection. Waiters
// return ErrClosed (through the backend's context).
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	sub := h.sub
	h.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
}

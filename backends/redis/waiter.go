package redis

// Waiting: fair hand-off (internals; the package doc in doc.go has what users need).
//
// A blocked Acquire waits in line on the server, and a release hands the
// lock straight to the first live waiter, in the release script itself:
//
//   - Waiter line (B:waiters:fencelock, see Keys atop keys.go), a list of waiting tokens in
//     arrival order, and per waiter a liveness key B:wait:<token> holding
//     the TTL to grant it with, its Client's id and its label. The liveness key expires unless the waiter
//     refreshes it (every TTL/4, at most every second; it lasts three
//     refreshes, at least 300 ms), so a waiter that died drops out of line
//     by itself. Both exist only while someone waits (a line of dead
//     waiters' entries expires 6 s, or twice the liveness if longer, after
//     the last join or refresh; an emptied line is gone at once). The
//     scripts name liveness keys themselves (they share the lock's hash
//     tag, hence its slot).
//   - A refused blocked attempt joins the line, or keeps its place: SET of
//     its liveness key with GET tells whether it had one; if not, it RPUSHes
//     its token. A waiter whose liveness lapsed (it stalled) and who then
//     refreshes joins again at the end, so a token can be in line twice;
//     a refreshing waiter whose entry is gone (the line was deleted) is put
//     back (LPOS).
//   - Release, in the same script, pops the line's head and GETDELs its
//     liveness key, dropping heads whose key is gone, until one is live;
//     then it overwrites the lock key with that waiter's token and TTL,
//     issues its fence exactly as Acquire does, writes the waiter's label
//     key from its liveness key's label, and PUBLISHes
//     "grant <token> <fence>" on that waiter's
//     Client's grant channel, B:released:<client id> (32 hex digits, random
//     per Client, stored in the waiter's liveness key), which
//     only that Client subscribes to: a grant wakes one Client, not every
//     Client waiting on the lock. With nobody in line the release publishes
//     nothing: a waiter is in line before it sleeps (its queued attempt ran
//     before the release, or after it and found the lock free). When the
//     line held only dead waiters' entries, it PUBLISHes the lock key on
//     the release channel (a release notice, heard by all), so that a
//     waiter whose liveness lapsed (it stalled) asks again at once.
//   - The waiter holds when that message reaches it: a hand-off costs the
//     holder's release call and one message, no waiter round trip, and its
//     lease counts from its last refresh (sent before the grant). If it
//     finds most of the TTL gone (it stalled), it asks again, and the
//     acquire script answers its grant with the TTL restarted.
//   - While a live waiter is in line, a free lock (a holder expired, or a
//     peer such as redis-py released it without publishing) is granted
//     only to that waiter: TryAcquire and later arrivals are refused with
//     a message that waiters queued first. The waiter asks when the
//     holder's TTL runs out (the refused attempt returns it) and at each
//     refresh.
//   - A token is granted only by the script that deletes its liveness key
//     (a hand-off's GETDEL, or its own attempt at the head of the line of
//     a free lock), and every script that removes a token's entries deletes
//     that key: a stale second entry of a granted token finds no key and is
//     dropped. A token is thus handed the lock at most once per join, never
//     again for a stale entry.
//   - A waiter whose wait ends without a grant (ctx ended, Client closed)
//     leaves the line (every entry of its token) in the abandon script,
//     which also releases, to the next in line, a grant handed to it
//     meanwhile: it leaves nothing held.
//   - A waiter that died within its liveness window may still be handed
//     the lock, which then stays held for that waiter's TTL, as after a
//     holder's crash.
//
// Each Client keeps at most two pub/sub connections, whatever the number of
// its waiters. The lane serves one blocked Acquire at a time: it reads its
// own connection, so its grant wakes it straight from the network poller,
// with no goroutine in between. Every other waiter of the Client shares the
// hub, one connection read by one dispatcher goroutine. Both subscribe to
// the channel of each lock waited for and to the Client's own grant channel
// for that lock (the lane's id differs from the hub's), and keep them for a
// second after the last wait ended, so that a client looping on a lock
// does not resubscribe each time (the lane then closes its connection). A
// waiter joins the line only once the server confirmed its subscription (a
// PING reply, one per channel per connection), so no grant is published
// before it can hear it. If a connection breaks, its waiters ask again
// (the attempt answers a grant made meanwhile); a lane that cannot connect
// hands its waiter to the hub. A lane wait whose ctx ends closes the lane's
// connection, the only way to interrupt its read; the next wait dials
// again. Within a Client, waiters on a name queue in arrival order
// and only the first of them is in the server's line: Clients are served
// in arrival order, and a Client's waiters in theirs. (FIFO is false only
// because a Client's second waiter joins the server's line when its first
// is served.)
//
// In Redis Cluster the release notice is a plain PUBLISH, which the cluster
// broadcasts to every node, so each subscription connection (to any node)
// hears every shard and survives failover; sharded pub/sub would avoid the broadcast
// but need a connection per shard.

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redisx"
)

// hub is a client's shared pub/sub subscription, for every waiter but the
// one on the lane (lane.go) and for Wait: one connection and two
// goroutines per client, however many waiters (not a connection per
// waiter). It is started by the first wait that needs it and stopped by
// close.
//
// Channels are subscribed while at least one waiter waits on them, each
// together with this hub's grant channel for that lock, <channel>:<id>: a
// release hands the lock to a queued waiter by publishing there (see
// grant.lua), so a grant reaches the one Client whose waiter it is, not
// every Client waiting on the lock. Release
// PUBLISHes (not SPUBLISH) to the lock's channel: on a single server that
// reaches us directly; in Redis Cluster a plain PUBLISH is broadcast to
// every node over the cluster bus, so our one connection, to any node,
// hears releases from every shard, and go-redis's automatic reconnect (to
// any node) keeps working through failover and resharding. Sharded pub/sub
// would spare the bus that broadcast but needs a connection per shard, each
// re-routed on every topology change.
//
// The writer goroutine sends SUBSCRIBE, UNSUBSCRIBE and PING in the order
// waiters asked for them, so that a waiter's PING reply proves its
// channel's subscription is in effect on the server; the dispatcher
// goroutine reads replies and messages and wakes waiters. Neither blocks a
// caller: a waiter only selects on channels and its ctx.
type hub struct {
	client  goredis.UniversalClient
	id      string        // 32 hex digits: this Client's grant channels are <channel>:<id>
	closing chan struct{} // closed by close

	mu     sync.Mutex
	closed bool
	sub    *redisx.Sub                     // the subscription connection, from the first wait on
	chans  map[string]map[*waiter]struct{} // channel → its waiters
	pings  map[string]*waiter              // PING payload → waiter
	seq    uint64
	// msgs counts the release messages received per subscribed channel,
	// and epoch the times the subscription connection broke (messages
	// may have been lost): a blocked Acquire compares them with what it
	// saw before its last attempt (see hub.mark and hub.awaitRelease).
	msgs  map[string]uint64
	epoch uint64
	// confirmed holds, per subscribed channel, 1 + the epoch in which a
	// PING sent after its SUBSCRIBE was answered: a later waiter on the
	// channel needs no PING of its own in that epoch. lingering holds the
	// timers of channels nobody waits on any more, unsubscribed only when
	// the timer fires (a waiter that comes back soon, as in a hot loop of
	// Acquire and Release, finds its subscription in place).
	confirmed map[string]uint64
	lingering map[string]*time.Timer
}

// linger is how long a channel stays subscribed after its last waiter left.
const linger = time.Second

// waiter is one Wait call, or one blocked Acquire (blocker.go), which also
// sets lock and token to take a grant handed to it by a release.
type waiter struct {
	channel string
	lock    string       // the lock key: a message equal to it is a release notice
	token   string       // a queued Acquire's token, else ""
	fence   driver.Fence // the fence of a grant handed to token (under hub.mu)
	epoch   uint64       // the hub's epoch when ping was sent
	ping    string
	pong    chan struct{} // closed when the reply to our PING arrives
	wake    chan struct{} // cap 1: a release was published, or the connection broke
}

func newHub(client goredis.UniversalClient) *hub {
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails (Go ≥ 1.24)
	return &hub{
		client:  client,
		id:      hex.EncodeToString(id[:]),
		closing: make(chan struct{}),
		chans:   map[string]map[*waiter]struct{}{},
		pings:   map[string]*waiter{},
		msgs:    map[string]uint64{},

		confirmed: map[string]uint64{},
		lingering: map[string]*time.Timer{},
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
		// Broken connections wake every waiter: they retry TryAcquire and
		// wait again on a new connection.
		h.sub = redisx.NewSub(h.client, redisx.Handlers{Message: h.message, Pong: h.pong, Broken: h.wakeAll})
	}
	ws := h.chans[w.channel]
	if ws == nil {
		ws = map[*waiter]struct{}{}
		h.chans[w.channel] = ws
		if t, ok := h.lingering[w.channel]; ok {
			t.Stop() // still subscribed
			delete(h.lingering, w.channel)
		} else {
			h.sub.Subscribe(w.channel, h.grantChannel(w.channel))
		}
	}
	ws[w] = struct{}{}
	if h.confirmed[w.channel] == h.epoch+1 {
		w.epoch, w.pong = h.epoch, closedPong // in effect on this connection
		return nil
	}
	h.pingLocked(w)
	return nil
}

// subscribed reports whether ch's subscription is confirmed on the current
// connection (a waiter on it would need no PING).
func (h *hub) subscribed(ch string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.closed && h.confirmed[ch] == h.epoch+1
}

// closedPong is the pong of a waiter whose channel's subscription was
// already confirmed.
var closedPong = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// pingLocked queues a PING for w, whose reply closes w.pong: proof that
// w's channel is subscribed on the current connection. A PING w sent
// before is forgotten: its reply, if it still comes, proves nothing
// about the new connection (and must not close the new pong twice).
// Callers hold h.mu.
func (h *hub) pingLocked(w *waiter) {
	if w.ping != "" {
		delete(h.pings, w.ping)
	}
	w.epoch = h.epoch
	w.pong = make(chan struct{})
	h.seq++
	w.ping = "fencelock:" + strconv.FormatUint(h.seq, 36)
	h.pings[w.ping] = w
	h.sub.Ping(w.ping)
}

// leave removes w, queueing an UNSUBSCRIBE if it was its channel's last
// waiter.
func (h *hub) leave(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.pings, w.ping)
	ws := h.chans[w.channel]
	delete(ws, w)
	if len(ws) == 0 {
		delete(h.chans, w.channel)
		if !h.closed {
			h.lingerLocked(w.channel)
		}
	}
}

// lingerLocked unsubscribes ch after linger unless a waiter comes back to
// it first. Callers hold h.mu.
func (h *hub) lingerLocked(ch string) {
	var t *time.Timer
	t = time.AfterFunc(linger, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.lingering[ch] != t || h.closed {
			return // a waiter came back, or the hub closed
		}
		delete(h.lingering, ch)
		delete(h.confirmed, ch)
		delete(h.msgs, ch)
		h.sub.Unsubscribe(ch, h.grantChannel(ch))
	})
	h.lingering[ch] = t
}

// grantChannel is the channel on which releases hand the lock of channel
// ch to this hub's waiters.
func (h *hub) grantChannel(ch string) string { return ch + ":" + h.id }

// message handles a message on a lock's channel or on our grant channel
// for it: a hand-off ("grant <token> <fence>", see grant.lua) wakes the one
// waiter queued under that token, if it is ours, and nobody else (the lock
// is not free); anything else on the lock's channel is a release notice
// (the lock key, from fencelock or a peer publishing the same way) and
// wakes every waiter on the channel.
func (h *hub) message(ch, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	lockCh, grants := strings.CutSuffix(ch, ":"+h.id)
	ws, ok := h.chans[lockCh]
	if !ok {
		return
	}
	if grants {
		if token, fence, ok := parseGrant(payload); ok {
			h.grant(ws, token, fence)
		}
		return
	}
	var lock string // every waiter on a channel waits for the same lock
	for w := range ws {
		lock = w.lock
		break
	}
	if payload != lock {
		if token, fence, ok := parseGrant(payload); ok {
			// A grant on the lock's channel itself: made for a waiter
			// that queued without a Client id.
			h.grant(ws, token, fence)
			return
		}
	}
	h.msgs[ch]++
	for w := range ws {
		w.signal()
	}
}

// grant hands fence to the waiter in ws queued under token, if any.
// Callers hold h.mu.
func (h *hub) grant(ws map[*waiter]struct{}, token string, fence driver.Fence) {
	for w := range ws {
		if w.token == token {
			w.fence = fence
			w.signal()
		}
	}
}

// parseGrant parses a hand-off message, "grant <token> <fence>".
func parseGrant(s string) (token string, fence driver.Fence, ok bool) {
	rest, ok := strings.CutPrefix(s, "grant ")
	if !ok {
		return "", 0, false
	}
	token, f, ok := strings.Cut(rest, " ")
	if !ok || len(token) != 32 {
		return "", 0, false
	}
	v, err := strconv.ParseUint(f, 10, 64)
	return token, driver.Fence(v), err == nil && v > 0
}

// granted returns the fence of a grant handed to w, or 0.
func (h *hub) granted(w *waiter) driver.Fence {
	h.mu.Lock()
	defer h.mu.Unlock()
	return w.fence
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.epoch++
	for _, ws := range h.chans {
		for w := range ws {
			w.signal()
		}
	}
}

func (h *hub) pong(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.pings[payload]; w != nil {
		delete(h.pings, payload)
		close(w.pong)
		if w.epoch == h.epoch {
			if _, ok := h.chans[w.channel]; ok {
				h.confirmed[w.channel] = h.epoch + 1
			}
		}
	}
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// close stops the hub's goroutines and closes its connection. Waiters
// return ErrClosed.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.closing)
	for _, t := range h.lingering {
		t.Stop()
	}
	clear(h.lingering)
	sub := h.sub
	h.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
}

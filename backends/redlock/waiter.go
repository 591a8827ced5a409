package redlock

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
)

// Wait implements driver.Waiter. It returns nil when the lock named name
// may be free: a release notice arrived from any primary, a majority of
// primaries had no lock key when checked, or enough of the holder's keys
// ran out (by their PTTLs) to leave a majority free. It returns ctx.Err()
// when ctx ends first, and ErrClosed when the backend closes.
//
// It subscribes on every primary through that primary's one shared pub/sub
// connection, waits until a majority of them confirm (the reply to a PING
// sent after the SUBSCRIBE), and only then checks the keys, so a release
// after Wait was called is not missed: a release frees a majority of
// primaries and publishes on each, and any majority meets the confirmed
// one. A frozen or dead primary never confirms and is simply not needed.
func (b *backend) Wait(ctx context.Context, name string) error {
	if g := b.inFlight(name); g != nil {
		// This Client's own attempt decides first (see gate).
		select {
		case <-g.done:
		case <-ctx.Done():
			return ctx.Err()
		case <-b.ctx.Done():
			return driver.ErrClosed
		}
	}
	k := keysFor(name)
	n, q := len(b.nodes), b.quorum
	wake := make(chan struct{}, 1)
	pongs := make(chan struct{}, n)
	for _, nd := range b.nodes {
		w := &waiter{channel: k.channel, wake: wake, pong: pongs}
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
		case <-ctx.Done():
			return ctx.Err()
		case <-b.ctx.Done():
			return driver.ErrClosed
		}
	}
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
		case <-expired:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-b.ctx.Done():
			return driver.ErrClosed
		}
	}
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
	client  *goredis.Client
	closing chan struct{} // closed by close
	kick    chan struct{} // cap 1: ops queued for the writer
	wg      sync.WaitGroup

	mu      sync.Mutex
	started bool
	closed  bool
	ps      *goredis.PubSub
	chans   map[string]map[*waiter]struct{} // channel → its waiters
	pings   map[string]*waiter              // PING payload → waiter
	seq     uint64
	ops     []hubOp
}

type hubOp struct {
	kind byte // 's' SUBSCRIBE, 'u' UNSUBSCRIBE, 'p' PING
	arg  string
}

// waiter is one Wait call's registration on one primary. wake and pong are
// shared by the call's registrations on every primary.
type waiter struct {
	channel string
	ping    string
	pong    chan struct{} // one send when our PING's reply arrives (cap: number of primaries)
	wake    chan struct{} // cap 1: a release was published
}

func newHub(client *goredis.Client) *hub {
	return &hub{
		client:  client,
		closing: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		chans:   map[string]map[*waiter]struct{}{},
		pings:   map[string]*waiter{},
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
	if !h.started {
		h.started = true
		h.ps = h.client.Subscribe(context.Background()) // no channels yet: no I/O
		h.wg.Add(2)
		go h.dispatch()
		go h.write()
	}
	ws := h.chans[w.channel]
	if ws == nil {
		ws = map[*waiter]struct{}{}
		h.chans[w.channel] = ws
		h.queue(hubOp{'s', w.channel})
	}
	ws[w] = struct{}{}
	h.seq++
	w.ping = "fencelock:" + strconv.FormatUint(h.seq, 36)
	h.pings[w.ping] = w
	h.queue(hubOp{'p', w.ping})
	return nil
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
			h.queue(hubOp{'u', w.channel})
		}
	}
}

// queue appends an op for the writer. Callers hold h.mu.
func (h *hub) queue(op hubOp) {
	h.ops = append(h.ops, op)
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// write is the writer goroutine: it sends queued ops in order. An op that
// fails (the connection is broken) is dropped: go-redis reconnects and
// resubscribes on the dispatcher's next read, and a waiter whose PING was
// lost simply gets no confirmation from this primary.
func (h *hub) write() {
	defer h.wg.Done()
	ctx := context.Background()
	for {
		select {
		case <-h.closing:
			return
		case <-h.kick:
		}
		h.mu.Lock()
		ops := h.ops
		h.ops = nil
		h.mu.Unlock()
		for _, op := range ops {
			switch op.kind {
			case 's':
				_ = h.ps.Subscribe(ctx, op.arg)
			case 'u':
				_ = h.ps.Unsubscribe(ctx, op.arg)
			case 'p':
				_ = h.ps.Ping(ctx, op.arg)
			}
		}
	}
}

// dispatch is the dispatcher goroutine: it reads the subscription
// connection and wakes waiters.
func (h *hub) dispatch() {
	defer h.wg.Done()
	ctx := context.Background()
	var backoff time.Duration
	for {
		msg, err := h.ps.Receive(ctx)
		if err != nil {
			select {
			case <-h.closing:
				return
			default:
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-h.closing:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		switch m := msg.(type) {
		case *goredis.Message:
			h.wakeChannel(m.Channel)
		case *goredis.Pong:
			h.pong(m.Payload)
		}
	}
}

func (h *hub) wakeChannel(ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.chans[ch] {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (h *hub) pong(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.pings[payload]; w != nil {
		delete(h.pings, payload)
		select {
		case w.pong <- struct{}{}:
		default:
		}
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
	close(h.closing)
	ps, started := h.ps, h.started
	h.mu.Unlock()
	if started {
		_ = ps.Close()
		h.wg.Wait()
	}
}

package election

import (
	"context"
	"time"

	"github.com/fencelock/fencelock"
)

// Leader is who leads an election, as the store reported it.
type Leader struct {
	// Value is the leader's published value.
	Value string
	// Term is the leader's term number (its lease's fence), or 0 where the
	// backend cannot report fences (Capabilities.Inspect.Fence: ZooKeeper,
	// PostgreSQL, Redlock); the leader itself always knows its Term.Fence.
	Term fencelock.Fence
	// Since is when this Election first saw this term (a local time: the
	// store does not record when a lock was granted).
	Since time.Time
	// ValidFor is how long the store keeps this leader without a renewal,
	// as of the answer (0 if the backend cannot tell).
	ValidFor time.Duration
}

// Observe sends the current leader and then each change of leader or of
// its value, in order, until ctx ends; then it closes the channel. It
// polls the store every Options.PollInterval. A reader that is slow gets
// the latest leader, the changes it missed coalesced; a reader that reads
// promptly sees every leader who held for two intervals. A change is a
// new term or a new value; where the backend reports no term (Term 0), a
// leader followed by another with the same value reads as no change. The
// channel is closed at once if the Locker cannot report leaders (see
// Leader).
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	in, err := e.inspector()
	if err != nil {
		close(out)
		return out
	}
	go e.observe(ctx, in, out)
	return out
}

func (e *Election) observe(ctx context.Context, in Inspector, out chan<- Leader) {
	defer close(out)
	tick := time.NewTicker(e.o.PollInterval)
	defer tick.Stop()
	var last Leader
	var pending *Leader
	poll := func() {
		info, err := in.Inspect(ctx, e.name)
		if err != nil || !info.Held {
			return // a failed poll is retried at the next tick
		}
		ld := e.leaderOf(info)
		if ld.Term == last.Term && ld.Value == last.Value {
			return
		}
		last = ld
		pending = &ld // replaces a change the reader has not taken yet
	}
	poll()
	for {
		var send chan<- Leader
		var next Leader
		if pending != nil {
			send, next = out, *pending
		}
		select {
		case <-ctx.Done():
			return
		case send <- next:
			pending = nil
		case <-tick.C:
			poll()
		}
	}
}

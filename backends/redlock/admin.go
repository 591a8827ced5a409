package redlock

// Admin (internals; the package doc in doc.go has what users need).
//
// The backend implements driver.Admin, so `fencelock conformance --url
// redlock://...` runs every check: Expire deletes the lock key on every
// primary; KillSessions CLIENT KILLs this Client's connections (found by
// their ClientName) and cuts off the leases granted before it: their
// renewals and releases fail, as across a partition, and the primaries
// drop them when their TTL runs out. It also implements driver.FenceAdmin
// (StoredFence: the largest counter that a majority of primaries hold at
// least; DropFenceState: deletes the fence key on every primary) and
// driver.QuorumAdmin (Nodes; RaiseFence: raises one primary's counter
// alone), with which the conformance suite checks the time floor and the
// fence write-back across diverged primaries.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
)

// adminTimeout bounds an admin call whose ctx has no deadline.
const adminTimeout = 5 * time.Second

// Expire implements driver.Admin: it deletes the lock key name on every
// primary, whoever holds it (the fence keys stay), as if its TTL had
// passed; the holder is not told. It fails only if fewer than a majority
// of primaries could be asked.
func (b *backend) Expire(ctx context.Context, name string) error {
	k := keysFor(name)
	replies := b.fan(deadlineOf(ctx, adminTimeout), all(len(b.nodes)), func(ctx context.Context, i int) (int64, int64, error) {
		v, err := b.nodes[i].c.Del(ctx, k.lock).Result()
		return v, 0, err
	})
	return b.collectAdmin(ctx, "expire", replies)
}

// StoredFence implements driver.FenceAdmin: it reads the fence key of the
// lock with store key name on every primary and returns the largest value
// that a majority of them hold at least (the majority-th largest counter;
// a primary without the key holds nothing): every later grant's
// write-back majority meets that majority, so its fence exceeds the
// value. ok is false if fewer than a majority of primaries keep a counter.
// It fails if fewer than a majority answered; a primary that did not
// answer counts as keeping nothing, so the value is then a lower bound.
func (b *backend) StoredFence(ctx context.Context, name string) (driver.Fence, bool, error) {
	k := keysFor(name)
	replies := b.fan(deadlineOf(ctx, adminTimeout), all(len(b.nodes)), func(ctx context.Context, i int) (int64, int64, error) {
		s, err := b.nodes[i].c.Get(ctx, k.fence).Result()
		if errors.Is(err, goredis.Nil) {
			return 0, 0, nil
		}
		if err != nil {
			return 0, 0, err
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0, 0, fmt.Errorf("fence key %q holds %q, not a fencelock counter", k.fence, s)
		}
		return 1, v, nil
	})
	var (
		held []int64 // the counters of the primaries that keep one
		errs []error
	)
	for range b.nodes {
		select {
		case r := <-replies:
			switch {
			case r.err != nil:
				errs = append(errs, nodeErr(b.nodes[r.i].addr, "stored fence", r.err))
			case r.a == 1:
				held = append(held, r.b)
			}
		case <-ctx.Done():
			return 0, false, ctxErr(ctx, "stored fence", "waiting for the primaries")
		}
	}
	if len(b.nodes)-len(errs) < b.quorum {
		return 0, false, fmt.Errorf("redlock stored fence: only %d of %d primaries answered: %w", len(b.nodes)-len(errs), len(b.nodes), errors.Join(errs...))
	}
	if len(held) < b.quorum {
		return 0, false, nil
	}
	slices.Sort(held)
	return driver.Fence(held[len(held)-b.quorum]), true, nil
}

// DropFenceState implements driver.FenceAdmin: it deletes the fence key of
// the lock with store key name on every primary, as if each restarted
// empty; the next grant's fence then rests on the primaries' time floor
// (see Fences, atop redlock.go). The lock must be free. It fails only
// if fewer than a majority of primaries could be asked.
func (b *backend) DropFenceState(ctx context.Context, name string) error {
	k := keysFor(name)
	replies := b.fan(deadlineOf(ctx, adminTimeout), all(len(b.nodes)), func(ctx context.Context, i int) (int64, int64, error) {
		v, err := b.nodes[i].c.Del(ctx, k.fence).Result()
		return v, 0, err
	})
	return b.collectAdmin(ctx, "drop fence state", replies)
}

// Nodes implements driver.QuorumAdmin: the number of primaries, in the
// order New or the URL gave them.
func (b *backend) Nodes() int { return len(b.nodes) }

// RaiseFence implements driver.QuorumAdmin: on primary node alone it sets
// the fence counter of the lock with store key name to by above what that
// primary's next grant would return without it, max(stored counter,
// server TIME in µs) + by, as grants that reached other majorities would
// leave it. It fails if the counter would reach 2^53 (the scripts count
// in Lua's doubles).
func (b *backend) RaiseFence(ctx context.Context, name string, node int, by uint64) error {
	if node < 0 || node >= len(b.nodes) {
		return fmt.Errorf("%w: redlock RaiseFence: node %d of %d primaries", driver.ErrInvalid, node, len(b.nodes))
	}
	if by >= 1<<53 {
		return fmt.Errorf("%w: redlock RaiseFence by %d: counters stay below 2^53", driver.ErrInvalid, by)
	}
	ctx, cancel := context.WithDeadline(ctx, deadlineOf(ctx, adminTimeout))
	defer cancel()
	nd := b.nodes[node]
	if err := raiseScript.Run(ctx, nd.c, []string{keysFor(name).fence}, by).Err(); err != nil {
		return nodeErr(nd.addr, "raise fence", err)
	}
	return nil
}

// KillSessions implements driver.Admin: on every primary it kills (CLIENT
// KILL) every connection of this backend, found by the go-redis clients'
// ClientName (URL-opened clients get a unique one), including the pub/sub
// connections. Redis keeps no session state, so the lock keys themselves
// stay until their TTL: leases granted before the call are cut off — their
// Extend and Release fail with ErrUnavailable, as across a network
// partition — and the primaries drop them when their TTL runs out
// unrenewed. New requests reconnect.
func (b *backend) KillSessions(ctx context.Context) error {
	for _, nd := range b.nodes {
		if nd.c.Options().ClientName == "" {
			return fmt.Errorf("%w: redlock KillSessions: the go-redis client for %s has no ClientName, so its connections cannot be told from others: set Options.ClientName", driver.ErrInvalid, nd.addr)
		}
	}
	b.epoch.Add(1)
	replies := b.fan(deadlineOf(ctx, adminTimeout), all(len(b.nodes)), func(ctx context.Context, i int) (int64, int64, error) {
		n, err := b.killOwn(ctx, b.nodes[i])
		return n, 0, err
	})
	return b.collectAdmin(ctx, "kill sessions", replies)
}

// killOwn kills nd's connections named like ours, the one it asks through
// last.
func (b *backend) killOwn(ctx context.Context, nd *node) (int64, error) {
	name := nd.c.Options().ClientName
	conn := nd.c.Conn()
	defer conn.Close()
	self, err := conn.ClientID(ctx).Result()
	if err != nil {
		return 0, err
	}
	list, err := conn.ClientList(ctx).Result()
	if err != nil {
		return 0, err
	}
	var killed int64
	for line := range strings.SplitSeq(list, "\n") {
		var id, cname string
		for f := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			} else if v, ok := strings.CutPrefix(f, "name="); ok {
				cname = v
			}
		}
		if cname != name || id == "" || id == fmt.Sprint(self) {
			continue
		}
		if err := conn.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil && !strings.Contains(err.Error(), "No such client") {
			return killed, err
		}
		killed++
	}
	// Our own connection last; its reply never comes (it is gone).
	_ = conn.Do(ctx, "CLIENT", "KILL", "ID", fmt.Sprint(self), "SKIPME", "no").Err()
	return killed + 1, nil
}

// collectAdmin waits for every primary's answer and fails only if fewer
// than a majority answered.
func (b *backend) collectAdmin(ctx context.Context, op string, replies <-chan reply) error {
	var errs []error
	for range b.nodes {
		select {
		case r := <-replies:
			if r.err != nil {
				errs = append(errs, nodeErr(b.nodes[r.i].addr, op, r.err))
			}
		case <-ctx.Done():
			return ctxErr(ctx, op, "waiting for the primaries")
		}
	}
	if len(b.nodes)-len(errs) < b.quorum {
		return fmt.Errorf("redlock %s: only %d of %d primaries answered: %w", op, len(b.nodes)-len(errs), len(b.nodes), errors.Join(errs...))
	}
	return nil
}

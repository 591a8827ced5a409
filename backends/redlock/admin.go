package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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

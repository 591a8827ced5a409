package redis

// Admin (internals; the package doc in doc.go has what users need).
//
// The backend implements driver.Admin, the out-of-band hooks
// `fencelock conformance --url` uses (not handed out by Client.As):
//
//   - Expire DELs a lock key whoever holds it, as if its TTL had passed;
//     never the fence key, and nothing is published (expiry publishes
//     nothing either).
//   - KillSessions does what a session-owning store does when a client's
//     session is cut (Redis has none: a lock outlives the connection that
//     set it): it deletes every lock this Client holds, each only while it
//     still holds this Client's token, then kills this Client's
//     connections on every server (CLIENT KILL ID), its pub/sub connections
//     included. The holders' next renewal finds the lock gone; go-redis
//     reconnects for later requests. The connections are found in CLIENT
//     LIST by the go-redis ClientName: clients opened by URL get a unique
//     "fencelock-" name (see URLOpener); a client given to New needs a
//     ClientName no other process uses, else KillSessions returns
//     ErrInvalid.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redisx"
)

// Expire implements driver.Admin: it deletes the lock key of the store key
// name with a plain DEL, whoever holds it, as if its TTL had passed. The
// fence key is left alone (fences must keep increasing), and nothing is
// published: expiry publishes nothing either. It returns nil if the lock
// was not held.
func (b *backend) Expire(ctx context.Context, name string) error {
	if err := b.client.Del(ctx, keysFor(name).lock).Err(); err != nil {
		return b.fail(ctx, "admin expire", err)
	}
	return nil
}

var (
	_ driver.FenceAdmin = (*backend)(nil)
	_ driver.QueueAdmin = (*backend)(nil)
)

// Waiters implements driver.QueueAdmin: the length of the lock's waiter
// line (LLEN). An entry whose waiter gave up stays until a hand-off drops
// it, so this may count a waiter that left; it never misses one queued.
func (b *backend) Waiters(ctx context.Context, name string) (int, error) {
	n, err := b.client.LLen(ctx, keysFor(name).queue).Result()
	if err != nil {
		return 0, b.fail(ctx, "admin waiters", err)
	}
	return int(n), nil
}

// StoredFence implements driver.FenceAdmin: the value of the lock's fence
// key (GET), which the next grant's fence must exceed.
func (b *backend) StoredFence(ctx context.Context, name string) (driver.Fence, bool, error) {
	v, err := b.client.Get(ctx, keysFor(name).fence).Uint64()
	if errors.Is(err, goredis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, b.fail(ctx, "admin stored fence", err)
	}
	return driver.Fence(v), true, nil
}

// DropFenceState implements driver.FenceAdmin: it deletes the lock's fence
// key, as a restart without persistence or a failover to a replica that
// missed it would; the next grant's fence then comes from the server's
// clock (the floor).
func (b *backend) DropFenceState(ctx context.Context, name string) error {
	if err := b.client.Del(ctx, keysFor(name).fence).Err(); err != nil {
		return b.fail(ctx, "admin drop fence state", err)
	}
	return nil
}

// KillSessions implements driver.Admin. Redis has no sessions: a lock
// lives until its TTL or a DEL, whatever happens to the connection that
// set it. KillSessions therefore does what a session-owning store does
// when a client's session is cut: it deletes every lock this backend holds
// (each only while it still holds this backend's token, never another
// holder's), then kills this backend's connections on every server with
// CLIENT KILL ID, including the pub/sub connections of its waiters, as a
// network fault would. The holders are not told; their next renewal finds
// the lock gone. go-redis reconnects for later requests.
//
// The backend's connections are found in CLIENT LIST by the go-redis
// client's ClientName: clients opened by URL get a unique one
// ("fencelock-" and 12 random hex digits) unless URLOpener.Configure sets
// another; a client passed to New must have a ClientName that no other
// process uses, or KillSessions returns an error wrapping ErrInvalid.
func (b *backend) KillSessions(ctx context.Context) error {
	name := clientName(b.client)
	if name == "" {
		return fmt.Errorf("%w: redis KillSessions finds this client's connections by their client name, and the go-redis client has none: set Options.ClientName to a name unique to this client", driver.ErrInvalid)
	}
	for _, l := range b.live.snapshot() {
		n, err := l.release(ctx)
		if err != nil {
			return b.fail(ctx, "admin kill sessions", err)
		}
		if n == 1 {
			b.live.remove(l)
		}
	}
	kill := func(ctx context.Context, c *goredis.Client) error { return killNamed(ctx, c, name) }
	var err error
	if cc, ok := b.client.(*goredis.ClusterClient); ok {
		err = cc.ForEachShard(ctx, kill)
	} else if c, ok := b.client.(*goredis.Client); ok {
		err = kill(ctx, c)
	} else {
		return fmt.Errorf("%w: redis KillSessions supports *goredis.Client and *goredis.ClusterClient, not %T", driver.ErrInvalid, b.client)
	}
	if err != nil {
		return b.fail(ctx, "admin kill sessions", err)
	}
	return nil
}

// killNamed kills, on c's server, every connection whose client name is
// name, through a connection of c's pool (killed last, as it has the name
// too).
func killNamed(ctx context.Context, c *goredis.Client, name string) error {
	conn := c.Conn()
	defer conn.Close()
	self, err := conn.ClientID(ctx).Result()
	if err != nil {
		return err
	}
	list, err := conn.ClientList(ctx).Result()
	if err != nil {
		return err
	}
	ids := namedClients(list, name)
	for _, id := range ids {
		if id == self {
			continue
		}
		// Gone already (closed between LIST and KILL) is fine.
		if err := conn.ClientKillByFilter(ctx, "ID", strconv.FormatInt(id, 10)).Err(); err != nil && !strings.Contains(err.Error(), "No such client") {
			return err
		}
	}
	// Our own connection last: the server closes it after the reply, which
	// may then be lost (an I/O error); a reply error is a real failure.
	err = conn.ClientKillByFilter(ctx, "ID", strconv.FormatInt(self, 10), "SKIPME", "no").Err()
	if err != nil && redisx.IsReply(err) {
		return err
	}
	return nil
}

// namedClients returns the IDs of the CLIENT LIST entries named name.
func namedClients(list, name string) []int64 {
	var ids []int64
	for line := range strings.SplitSeq(list, "\n") {
		var id int64
		named := false
		for f := range strings.FieldsSeq(line) {
			switch {
			case strings.HasPrefix(f, "id="):
				id, _ = strconv.ParseInt(f[3:], 10, 64)
			case f == "name="+name:
				named = true
			}
		}
		if named && id > 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// clientName is the ClientName of a go-redis client, or "".
func clientName(c goredis.UniversalClient) string {
	switch c := c.(type) {
	case *goredis.Client:
		return c.Options().ClientName
	case *goredis.ClusterClient:
		return c.Options().ClientName
	}
	return ""
}

// leaseSet is the leases a backend holds, for KillSessions. A lease leaves
// it when released or found lost; one its holder dropped without either
// leaves it when its TTL has surely passed (pruned as the set grows).
type leaseSet struct {
	mu    sync.Mutex
	m     map[*lease]struct{}
	prune int // size at which to prune next
}

func (s *leaseSet) add(l *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[*lease]struct{}{}
	}
	s.m[l] = struct{}{}
	if len(s.m) >= max(s.prune, 1024) {
		for o := range s.m {
			if o.expired() {
				delete(s.m, o)
			}
		}
		s.prune = 2 * len(s.m)
	}
}

func (s *leaseSet) remove(l *lease) {
	s.mu.Lock()
	delete(s.m, l)
	s.mu.Unlock()
}

func (s *leaseSet) snapshot() []*lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*lease, 0, len(s.m))
	for l := range s.m {
		out = append(out, l)
	}
	return out
}

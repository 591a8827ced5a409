package redis

import (
	"context"
	"hash/maphash"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// script runs a Lua script as goredis.Script.Run does (EVALSHA, then EVAL
// with the source when the server answers NOSCRIPT), sending the same
// commands, but from one argument slice the caller owns: Script.Run
// copies its keys and arguments into a new slice and boxes every key and
// its own name and digest on each call, which was most of what a grant
// allocated besides go-redis's own connection handling.
type script struct {
	sha, src any // boxed once
	numKeys  int
}

func newScript(s *goredis.Script, src string, numKeys int) *script {
	return &script{sha: s.Hash(), src: src, numKeys: numKeys}
}

// run runs the script with args laid out as the command itself: args[0:3]
// are filled in here ("evalsha", the digest, the number of keys), then
// numKeys keys, then the script's arguments. It returns the reply's value.
// args must not be changed while run is running, nor reused for another
// command afterwards: go-redis hooks may keep the command.
func (s *script) run(ctx context.Context, c goredis.UniversalClient, args []any) (any, error) {
	args[0], args[1], args[2] = "evalsha", s.sha, s.numKeys
	cmd := goredis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	_ = c.Process(ctx, cmd)
	v, err := cmd.Result()
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		// The server lost its script cache (restart, SCRIPT FLUSH): EVAL
		// loads it again. Rare, so a fresh slice is fine.
		eargs := append([]any{"eval", s.src}, args[2:]...)
		cmd = goredis.NewCmd(ctx, eargs...)
		cmd.SetFirstKeyPos(3)
		_ = c.Process(ctx, cmd)
		v, err = cmd.Result()
	}
	return v, err
}

// boxes keeps the last boxed TTL and label a backend sent, so that a
// Client that asks with the same TTL and label each time (the defaults)
// does not box them anew for every attempt. A miss boxes as before.
type boxes struct {
	ttlBox   atomic.Pointer[boxed[int64]]
	labelBox atomic.Pointer[boxed[string]]
}

type boxed[T comparable] struct {
	v T
	a any
}

func box[T comparable](p *atomic.Pointer[boxed[T]], v T) any {
	if b := p.Load(); b != nil && b.v == v {
		return b.a
	}
	b := &boxed[T]{v: v, a: v}
	p.Store(b)
	return b.a
}

// millis is millis(d), boxed.
func (b *boxes) millis(d time.Duration) any { return box(&b.ttlBox, millis(d)) }

// label is label, boxed.
func (b *boxes) label(label string) any { return box(&b.labelBox, label) }

// keyArgs are a name's keys, and those the scripts take boxed as their
// arguments.
type keyArgs struct {
	name                              string
	k                                 keys
	lock, fence, queue, base, channel any
}

func boxKeys(k keys) *keyArgs {
	return &keyArgs{k: k, lock: k.lock, fence: k.fence, queue: k.queue, base: k.base, channel: k.channel}
}

// keyCache keeps the keyArgs of the names a backend used lately, in a
// small table indexed by a hash of the name (a name evicts the one in its
// slot): a Client that takes the same locks again, as most do, neither
// derives their keys nor boxes them again. Entries are immutable.
type keyCache [keyCacheSize]atomic.Pointer[keyArgs]

const keyCacheSize = 64

var keySeed = maphash.MakeSeed()

// keyArgs returns the keyArgs of the store key name.
func (b *backend) keyArgs(name string) *keyArgs {
	slot := &b.keys[maphash.String(keySeed, name)%keyCacheSize]
	if ka := slot.Load(); ka != nil && ka.name == name {
		return ka
	}
	ka := boxKeys(keysFor(name))
	ka.name = name
	slot.Store(ka)
	return ka
}

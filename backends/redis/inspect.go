package redis

// Labels and Inspect (internals; the package doc in doc.go has what users need).
//
// The lock key keeps the bare token, so redis-py and redsync still read and
// release it as theirs. The label lives beside it, in
// B:label:<token> ("<fence> <label>", B the lock's base, see Keys atop keys.go), written
// by the script that grants (acquire.lua, or the release that hands a
// waiter the lock: a queued waiter keeps its label in its liveness key,
// see grant.lua, whence the hand-off writes it), expiring with the lock and renewed
// with it, and deleted by the release or abandon that frees the grant (so
// that a released grant's key does not linger on to its TTL: thousands of
// keys waiting to expire cost the server more than the DEL); SetLabel
// rewrites it while the lock holds our token. A redis-py
// user sees one more key per held lock. Inspect is one read-only script:
// the holder's token, PTTL and label key; a redis-py or redsync holder reads
// as held with no label and fence 0. The waiter line may hold stale
// entries, so no waiter count is reported. Names ending in ":label:"
// followed by 32 hex digits (with a hash tag) are now reserved and escaped,
// like ":void:" and ":wait:".

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
)

var (
	_ driver.Inspector = (*backend)(nil)
	_ driver.Relabeler = (*lease)(nil)
)

// SetLabel implements driver.Relabeler: it rewrites the key beside the
// lock key that holds the lease's fence and label, while the lock holds
// our token.
func (l *lease) SetLabel(ctx context.Context, label string) error {
	v := l.fence.String() + " " + label
	n, err := labelScript.Run(ctx, l.b.client, []string{l.k.lock, l.k.label(l.token)}, l.token, v).Int64()
	if err != nil {
		return l.b.fail(ctx, "label", err)
	}
	if n != 1 {
		return fmt.Errorf("%w: the Redis key no longer holds this lease's token", driver.ErrLeaseLost)
	}
	return nil
}

// Inspect implements driver.Inspector with one read-only script: the
// lock key's holder, its PTTL, and the holder's label key. A holder that
// is not a fencelock client (redis-py, redsync) reads as held, with no
// label and fence 0.
func (b *backend) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	k := keysFor(name)
	res, err := inspectScript.Run(ctx, b.client, []string{k.lock}, k.base).Slice()
	if err != nil {
		return driver.LockInfo{}, b.fail(ctx, "inspect", err)
	}
	if len(res) == 0 || res[0] != int64(1) {
		return driver.LockInfo{Waiters: -1}, nil
	}
	info := driver.LockInfo{Held: true, Waiters: -1}
	if len(res) > 1 {
		if pttl, ok := res[1].(int64); ok && pttl > 0 {
			info.Remaining = time.Duration(pttl) * time.Millisecond
		}
	}
	if len(res) > 2 {
		if v, ok := res[2].(string); ok {
			f, lab, _ := strings.Cut(v, " ")
			v, _ := strconv.ParseUint(f, 10, 64)
			info.Fence = driver.Fence(v)
			info.Label = lab
		}
	}
	return info, nil
}

package redlock

// Labels and Inspect (internals; the package doc in doc.go has what users need).
//
// Each granting primary stores the label in <lock key>\xff:label:<token>
// as "<version> <label>" (the lock key keeps the bare token, as redsync
// writes it), in the acquire script (version 0), expiring and renewed with
// the lock, and deleted with the lock key by the script that frees it there
// (release, drop, or a hand-off's take-over), so that released grants' keys
// do not linger on to their TTL; SetLabel writes the next version on a majority, never over a
// newer one. Inspect is a majority read: the lock is held when one token
// holds it on a majority of primaries, with that token's newest label
// among them (any two majorities share a primary) and, as the
// remaining time, the majority-th longest PTTL. The fence is the acquiring
// client's quorum decision, stored as such on no primary, so Inspect does
// not report it; nor a waiter count.

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
)

var (
	//go:embed inspect.lua
	inspectLua string
	//go:embed label.lua
	labelLua string

	inspectScript = goredis.NewScript(inspectLua)
	labelScript   = goredis.NewScript(labelLua)
)

var (
	_ driver.Inspector = (*backend)(nil)
	_ driver.Relabeler = (*lease)(nil)
)

type seen struct {
	token, label string
	version      uint64 // the label's version (labelValue)
	pttl         time.Duration
}

// labelValue is what the label key holds: "<version> <label>". The grant
// writes version 0 and each SetLabel the next version, so that Inspect,
// which may read primaries a relabel has not reached yet (it is done on a
// majority), reports the newest label among the primaries it read.
func labelValue(version uint64, label string) string {
	if version == 0 && label == "" {
		return "" // nothing to store
	}
	return strconv.FormatUint(version, 10) + " " + label
}

// parseLabel splits a label key's value; a value without a version (as
// written before versions) is version 0.
func parseLabel(v string) (uint64, string) {
	ver, label, ok := strings.Cut(v, " ")
	if !ok {
		return 0, v
	}
	n, err := strconv.ParseUint(ver, 10, 64)
	if err != nil {
		return 0, v
	}
	return n, label
}

// Inspect implements driver.Inspector with a majority read: every primary
// is asked who holds the lock there; the lock is held when one token
// holds it on a majority (as a grant needs), with that token's label (a
// key beside the lock key, written by the grant) and, as the remaining
// time, the majority-th longest PTTL among those primaries: the lock is
// held while a majority keeps it. The label is the newest version among
// those primaries (a SetLabel that returned reached a majority, and any
// two majorities share a primary). Fences are decided by the client that
// acquired, not stored per lease: not reported.
func (b *backend) Inspect(ctx context.Context, name string) (driver.LockInfo, error) {
	n, q := len(b.nodes), b.quorum
	k := keysFor(name)
	got := make([]seen, n)
	replies := b.fan(deadlineOf(ctx, answerWait), all(n), func(ctx context.Context, i int) (int64, int64, error) {
		res, err := inspectScript.Run(ctx, b.nodes[i].c, []string{k.lock}).Slice()
		if err != nil {
			return 0, 0, err
		}
		if len(res) == 3 {
			s := seen{}
			s.token, _ = res[0].(string)
			if p, ok := res[1].(int64); ok && p > 0 {
				s.pttl = time.Duration(p) * time.Millisecond
			}
			raw, _ := res[2].(string)
			s.version, s.label = parseLabel(raw)
			got[i] = s
		}
		return 1, 0, nil
	})
	var errs []error
	answered := 0
	for range n {
		select {
		case r := <-replies:
			if r.err != nil {
				errs = append(errs, nodeErr(b.nodes[r.i].addr, "inspect", r.err))
				continue
			}
			answered++
		case <-ctx.Done():
			return driver.LockInfo{}, ctxErr(ctx, "inspect", fmt.Sprintf("%d of %d primaries had answered", answered, n))
		}
	}
	if answered < q {
		return driver.LockInfo{}, fmt.Errorf("%w: redlock inspect: %d of %d primaries answered, %d needed: %w", driver.ErrUnavailable, answered, n, q, errors.Join(errs...))
	}
	count := map[string][]seen{}
	for _, s := range got {
		if s.token != "" {
			count[s.token] = append(count[s.token], s)
		}
	}
	for _, ss := range count {
		if len(ss) < q {
			continue
		}
		pttls := make([]time.Duration, len(ss))
		info := driver.LockInfo{Held: true, Waiters: -1}
		var newest uint64
		for i, s := range ss {
			pttls[i] = s.pttl
			if i == 0 || s.version > newest {
				newest, info.Label = s.version, s.label
			}
		}
		slices.Sort(pttls)
		slices.Reverse(pttls)
		info.Remaining = pttls[q-1]
		return info, nil
	}
	return driver.LockInfo{Waiters: -1}, nil
}

// SetLabel implements driver.Relabeler: the label key on every primary
// where the lock holds our token; done once a majority stored it,
// ErrLeaseLost once a majority no longer holds our token.
func (l *lease) SetLabel(ctx context.Context, label string) error {
	n, q := len(l.b.nodes), l.b.quorum
	idx, notOurs := l.targets()
	ver := l.labelVersion.Add(1)
	value := labelValue(ver, label)
	replies := l.b.fan(deadlineOf(ctx, answerWait), idx, func(ctx context.Context, i int) (int64, int64, error) {
		v, err := labelScript.Run(ctx, l.b.nodes[i].c, []string{l.k.lock, l.k.label(l.token)}, l.token, value, ver).Int64()
		return v, 0, err
	})
	ok := 0
	var errs []error
	for got := 0; got < len(idx) && ok < q && notOurs <= n-q; got++ {
		select {
		case r := <-replies:
			switch {
			case r.err != nil:
				errs = append(errs, nodeErr(l.b.nodes[r.i].addr, "label", r.err))
			case r.a == 1:
				ok++
			default:
				notOurs++
			}
		case <-ctx.Done():
			return ctxErr(ctx, "label", fmt.Sprintf("%d of %d primaries had stored it, %d needed", ok, n, q))
		}
	}
	switch {
	case ok >= q:
		return nil
	case notOurs > n-q:
		return fmt.Errorf("%w: only %d of %d primaries still hold this lease's key", driver.ErrLeaseLost, n-notOurs, n)
	}
	return fmt.Errorf("%w: redlock label: %d of %d primaries stored it, %d needed: %w", driver.ErrUnavailable, ok, n, q, errors.Join(errs...))
}

package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
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
	pttl         time.Duration
}

// Inspect implements driver.Inspector with a majority read: every primary
// is asked who holds the lock there; the lock is held when one token
// holds it on a majority (as a grant needs), with that token's label (a
// key beside the lock key, written by the grant) and, as the remaining
// time, the majority-th longest PTTL among those primaries: the lock is
// held while a majority keeps it. Fences are decided by the client that
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
			s.label, _ = res[2].(string)
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
		for i, s := range ss {
			pttls[i] = s.pttl
			if info.Label == "" {
				info.Label = s.label
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
	replies := l.b.fan(deadlineOf(ctx, answerWait), idx, func(ctx context.Context, i int) (int64, int64, error) {
		v, err := labelScript.Run(ctx, l.b.nodes[i].c, []string{l.k.lock, l.k.label(l.token)}, l.token, label).Int64()
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

package redlock

import (
	"errors"
	"slices"
	"time"
)

// freeAt is a refusal that says when the lock may be free for the next
// attempt: when enough of the holder's keys have run out to free a
// majority (by the PTTLs the primaries returned), when the lead primary's
// key runs out (an ordered attempt asks it first), or when the place
// ahead of the waiter in the lead's queue ends. A blocked Acquire retries
// then at the latest (see Acquire), so a holder that stopped renewing is
// taken over about a round trip after its keys expire, not at the
// waiter's next backoff. Expiry publishes nothing: without this, only
// the backoff would find it.
type freeAt struct {
	error
	at time.Time
}

func (f *freeAt) Unwrap() error { return f.error }

// retryAt returns when the refusal err says the lock may be free.
func retryAt(err error) (time.Time, bool) {
	var f *freeAt
	if errors.As(err, &f) {
		return f.at, true
	}
	return time.Time{}, false
}

// expiresBy is when a key that a reply received at got said had ms
// milliseconds left (a PTTL, truncated by the server) is gone at the
// latest: the server measured it before the reply arrived.
func expiresBy(got time.Time, ms int64) time.Time {
	return got.Add(time.Duration(ms+1) * time.Millisecond)
}

// majorityFreeAt is when the lock is free on a majority of n primaries
// (q of them), given that held refused the attempt, ends holds when the
// refusals that gave a PTTL expire, and the rest (granted to the attempt,
// which abandons it, or not answered yet) count as free. ok is false when
// the refusals do not tell: the lock is free on a majority already
// (contention, not a holder), or too many of its keys have no expiry.
func majorityFreeAt(n, q, held, failed int, ends []time.Time) (time.Time, bool) {
	need := q - (n - held - failed) // held keys that must run out
	if need <= 0 || need > len(ends) {
		return time.Time{}, false
	}
	ends = slices.Clone(ends)
	slices.SortFunc(ends, func(x, y time.Time) int { return x.Compare(y) })
	return ends[need-1], true
}

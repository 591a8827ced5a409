package peers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// turnLock records, in a log shared by several, which lock each acquire
// ran on; after failAfter acquires (0: never) Try fails.
type turnLock struct {
	name      string
	log       *[]string
	n         int
	failAfter int
}

var errTurn = errors.New("turn lock failed")

func (l *turnLock) Try(ctx context.Context, key string) (Unlock, bool, error) {
	l.n++
	if l.failAfter > 0 && l.n > l.failAfter {
		return nil, false, errTurn
	}
	*l.log = append(*l.log, l.name)
	return func(context.Context) error { return nil }, true, nil
}

func (l *turnLock) Wait(ctx context.Context, key string) (Unlock, error) {
	u, _, err := l.Try(ctx, key)
	return u, err
}

func (l *turnLock) Close() error { return nil }

// runsOfLog compresses a log into "name×count" runs.
func runsOfLog(log []string) string {
	var out []string
	for i := 0; i < len(log); {
		j := i
		for j < len(log) && log[j] == log[i] {
			j++
		}
		out = append(out, fmt.Sprintf("%s×%d", log[i], j-i))
		i = j
	}
	return strings.Join(out, " ")
}

// TestInterleaveTakesTurns: the implementations of a store take turns
// of uncontendedBatch pairs, the first turn rotating, and every one
// runs all n pairs.
func TestInterleaveTakesTurns(t *testing.T) {
	n := 2*uncontendedBatch + uncontendedBatch/2
	var log []string
	a := &turnLock{name: "a", log: &log}
	b := &turnLock{name: "b", log: &log}
	sa, sb := sample{}, sample{}
	runs := []*turn{uncontendedTurn(a, "k", n, sa), uncontendedTurn(b, "k", n, sb)}
	interleave(t.Context(), time.Minute, runs, n, uncontendedBatch)
	// Turns a b, then b a (rotated), then a b of half a batch: the log's
	// runs merge the neighbours.
	want := fmt.Sprintf("a×%d b×%d a×%d b×%d", uncontendedBatch, 2*uncontendedBatch,
		uncontendedBatch+uncontendedBatch/2, uncontendedBatch/2)
	if got := runsOfLog(log); got != want {
		t.Fatalf("turns: %s, want %s", got, want)
	}
	for i, r := range runs {
		if r.err != nil {
			t.Fatalf("run %d: %v", i, r.err)
		}
	}
	for _, s := range []sample{sa, sb} {
		if s[MUncontP50] <= 0 || s[MUncontP99] < s[MUncontP50] {
			t.Fatalf("sample %v: want p50 > 0 and p99 ≥ p50", s)
		}
	}
}

// TestInterleaveFailureStopsOnlyThatRun: a run that fails takes no more
// turns and keeps its error; the other runs all n pairs.
func TestInterleaveFailureStopsOnlyThatRun(t *testing.T) {
	var log []string
	a := &turnLock{name: "a", log: &log, failAfter: uncontendedBatch + 3}
	b := &turnLock{name: "b", log: &log}
	n := 3 * uncontendedBatch
	sa, sb := sample{}, sample{}
	runs := []*turn{uncontendedTurn(a, "k", n, sa), uncontendedTurn(b, "k", n, sb)}
	interleave(t.Context(), time.Minute, runs, n, uncontendedBatch)
	if !errors.Is(runs[0].err, errTurn) {
		t.Fatalf("failed run's error %v", runs[0].err)
	}
	if a.n != uncontendedBatch+4 {
		t.Fatalf("the failed run was tried %d times, want %d (no turn after the failure)", a.n, uncontendedBatch+4)
	}
	if runs[1].err != nil || b.n != n || sb[MUncontP50] <= 0 {
		t.Fatalf("other run: err %v, %d pairs, sample %v", runs[1].err, b.n, sb)
	}
	if len(sa) != 0 {
		t.Fatalf("the failed run wrote a sample: %v", sa)
	}
	if got := slices.Index(log, "b"); got != uncontendedBatch {
		t.Fatalf("b's first pair at %d, want %d", got, uncontendedBatch)
	}
}

// TestChunkOrderRotates: each store's runnable implementations take the
// first place in turn, round by round; one whose clients did not all
// open is left out.
func TestChunkOrderRotates(t *testing.T) {
	cfg := Config{Counts: Counts{Workers: 1}}
	env := &Env{Impls: []Impl{{Store: "a"}, {Store: "a"}, {Store: "a"}, {Store: "b"}, {Store: "b"}, {Store: "b"}}}
	open := &implRun{clients: clients{nil, nil}}
	runs := []*implRun{open, open, open, open, {clients: clients{nil}}, open}
	want := map[int][][]int{1: {{0, 1, 2}, {3, 5}}, 2: {{1, 2, 0}, {5, 3}}, 3: {{2, 0, 1}, {3, 5}}}
	for round, w := range want {
		if got := chunkOrder(env, cfg, round, runs); !slices.EqualFunc(got, w, slices.Equal) {
			t.Errorf("round %d: order %v, want %v", round, got, w)
		}
	}
}

package peers

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitLock grants every Wait at once, logging its name in a shared log,
// except that after the first grant of each worker's turn (first) the
// next Wait ignores ctx and grants late, after the turn's end.
type waitLock struct {
	name  string
	log   *syncLog
	late  time.Duration // 0: never late
	n     int
	tries int
}

type syncLog struct {
	mu    sync.Mutex
	names []string
}

func (l *syncLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, s)
}

func (l *waitLock) Try(ctx context.Context, key string) (Unlock, bool, error) {
	u, err := l.Wait(ctx, key)
	return u, err == nil, err
}

func (l *waitLock) Wait(ctx context.Context, key string) (Unlock, error) {
	if strings.Contains(key, "-warm") { // the warm-up before a turn: at once, unlogged
		l.tries++
		return func(context.Context) error { return nil }, nil
	}
	l.n++
	if l.late > 0 && l.n%2 == 0 {
		time.Sleep(l.late) // a grant that lands after the turn's end
	} else {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Microsecond):
		}
	}
	l.log.add(l.name)
	return func(context.Context) error { return nil }, nil
}

func (l *waitLock) Close() error { return nil }

// TestContentionTakesTurns: a store's implementations contend in
// contentionTurns turns each, the first place rotating from turn to
// turn (a b, then b a), and each one's sample adds up its turns.
func TestContentionTakesTurns(t *testing.T) {
	log := &syncLog{}
	cfg := Config{ChunkTimeout: time.Minute, Counts: Counts{Workers: 2, Contention: contentionTurns * 30 * time.Millisecond}}
	env := &Env{Impls: []Impl{{ID: "a", Store: "s"}, {ID: "b", Store: "s"}}}
	runs := make([]*implRun, 2)
	for i, id := range []string{"a", "b"} {
		runs[i] = &implRun{clients: clients{nil, &waitLock{name: id, log: log}, &waitLock{name: id, log: log}}}
	}
	side := []sample{{}, {}}
	for j, err := range contendSideBySide(t.Context(), env, cfg, 1, runs, []int{0, 1}, side) {
		if err != nil {
			t.Fatalf("implementation %d: %v", j, err)
		}
	}
	var turns []string
	for i, n := range log.names {
		if i == 0 || n != log.names[i-1] {
			turns = append(turns, n)
		}
	}
	want := []string{"a", "b", "a"} // a, b | b, a: the middle turns merge
	if len(turns) != len(want) || turns[0] != want[0] || turns[1] != want[1] || turns[2] != want[2] {
		t.Fatalf("turns %v, want %v (a b, then b a)", turns, want)
	}
	for i, s := range side {
		if s[MThroughput] <= 0 || s[MWorkerMin] < contentionTurns {
			t.Fatalf("sample %d: %v, want grants in every turn", i, s)
		}
	}
}

// TestContendTurnCountsUntilEnd: a grant that returns after the turn's
// end is not counted, and the turn's length ends at its end, not when the
// last late wait returned; such a grant's wait counts until the end.
func TestContendTurnCountsUntilEnd(t *testing.T) {
	const d, late = 60 * time.Millisecond, 400 * time.Millisecond
	log := &syncLog{}
	workers := []Lock{&waitLock{name: "a", log: log, late: late}, &waitLock{name: "b", log: log, late: late}}
	tl := newTally(len(workers))
	if err := contendTurn(t.Context(), workers, nil, "k", d, tl); err != nil {
		t.Fatal(err)
	}
	if len(log.names) != 4 {
		t.Fatalf("%d grants made, want 4 (one early, one late per worker)", len(log.names))
	}
	for _, w := range workers {
		if n := w.(*waitLock).tries; n != 1 {
			t.Fatalf("%d warm-up tries by a worker, want 1 before the turn", n)
		}
	}
	if tl.counts[0] != 1 || tl.counts[1] != 1 {
		t.Fatalf("grants counted per worker %v, want [1 1]: the late ones came after the end", tl.counts)
	}
	if tl.ran < d || tl.ran > d+late/2 {
		t.Fatalf("turn length %v, want about %v (the late grants came %v later)", tl.ran, d, late)
	}
	if tl.worst > d+late/2 {
		t.Fatalf("worst wait %v, want at most about the turn's %v", tl.worst, d)
	}
	s := sample{}
	tl.write(s)
	if s[MThroughput] < 2/(d+late/2).Seconds() {
		t.Fatalf("throughput %v/s from 2 grants in %v", s[MThroughput], tl.ran)
	}
}

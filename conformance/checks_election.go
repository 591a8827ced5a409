package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/guard"
)

func init() {
	register(
		check{name: "ElectionOneLeaderRisingTerms", run: testElectionOneLeader},
		check{name: "ElectionObserveInOrder", run: testElectionObserve},
		check{name: "ElectionResignHandsOver", run: testElectionResign},
		check{name: "ElectionFrozenLeaderReplaced", run: testElectionFrozen},
		check{name: "ElectionLeaderProcessFrozen", run: testElectionProcessFreeze},
	)
}

func (e *env) election(opts *election.Options) *election.Election {
	e.t.Helper()
	el, err := election.New(e.client(), e.name("election"), opts)
	if err != nil {
		e.t.Fatalf("election.New: %v", err)
	}
	return el
}

type termSpan struct {
	who        int
	term       fencelock.Fence
	start, end time.Time // Campaign returned; min(ValidUntil, Resign called)
}

// testElectionOneLeader: three candidates on three clients campaign in
// turn; no two terms' validity intervals overlap beyond the backend's
// declared BreakOverlap, and terms rise in the order they start.
func testElectionOneLeader(t TB, e *env) {
	const candidates, rounds = 3, 4
	var mu sync.Mutex
	var spans []termSpan
	var errs errList
	var wg sync.WaitGroup
	for i := range candidates {
		el := e.election(&election.Options{TTL: longTTL})
		wg.Go(func() {
			for r := range rounds {
				tm, err := el.Campaign(e.ctx, fmt.Sprintf("candidate-%d", i))
				if err != nil {
					errs.addf("candidate %d round %d: Campaign: %v", i, r, err)
					return
				}
				s := termSpan{who: i, term: tm.Fence(), start: time.Now()}
				e.sleep(5 * time.Millisecond) // the leader's work
				s.end = time.Now()
				if vu := tm.ValidUntil(); vu.Before(s.end) {
					s.end = vu
				}
				if err := tm.Resign(e.ctx); err != nil {
					errs.addf("candidate %d round %d: Resign: %v", i, r, err)
				}
				mu.Lock()
				spans = append(spans, s)
				mu.Unlock()
			}
		})
	}
	e.waiting(fmt.Sprintf("%d candidates × %d terms", candidates, rounds))
	wg.Wait()
	errs.report(t, "campaign")
	if t.Failed() {
		return
	}
	slices.SortFunc(spans, func(a, b termSpan) int { return a.start.Compare(b.start) })
	for i := 1; i < len(spans); i++ {
		p, n := spans[i-1], spans[i]
		if n.start.Before(p.end.Add(-e.caps.BreakOverlap)) {
			t.Fatalf("candidate %d's term %d started %v before candidate %d's term %d ended (declared BreakOverlap %v): two leaders", n.who, n.term, p.end.Sub(n.start), p.who, p.term, e.caps.BreakOverlap)
		}
		e.checkFence(t, p.term, n.term, fmt.Sprintf("term %d after term %d", i+1, i))
	}
}

// testElectionObserve: an observer reading promptly sees every leader and
// every proclaimed value, in order, when each holds for several polls.
func testElectionObserve(t TB, e *env) {
	ic := e.caps.Inspect
	if !ic.Supported || !ic.Label {
		notApplicable(t, "the backend does not report lock labels (Capabilities.Inspect)")
	}
	const poll = 20 * time.Millisecond
	obs := e.election(&election.Options{PollInterval: poll})
	cand := e.election(&election.Options{TTL: longTTL})
	octx, stop := context.WithCancel(e.ctx)
	defer stop()
	ch := obs.Observe(octx)
	type seen struct {
		term  fencelock.Fence // 0 where the backend cannot report fences
		value string
	}
	termOf := func(f fencelock.Fence) fencelock.Fence {
		if !ic.Fence {
			return 0
		}
		return f
	}
	var got []seen
	gotDone := make(chan struct{})
	go func() {
		defer close(gotDone)
		for ld := range ch {
			got = append(got, seen{ld.Term, ld.Value})
		}
	}()
	var want []seen
	hold := 10 * poll // each leader's (and value's) time in office: many polls
	for i := range 3 {
		v := fmt.Sprintf("leader-%d", i)
		tm, err := cand.Campaign(e.ctx, v)
		mustNil(t, err, "Campaign")
		want = append(want, seen{termOf(tm.Fence()), v})
		e.sleep(hold)
		if ic.Relabel {
			v2 := v + "-proclaimed"
			mustNil(t, tm.Proclaim(e.ctx, v2), "Proclaim")
			want = append(want, seen{termOf(tm.Fence()), v2})
			e.sleep(hold)
		}
		mustNil(t, tm.Resign(e.ctx), "Resign")
	}
	stop()
	<-gotDone
	if !slices.Equal(got, want) {
		t.Fatalf("Observe saw %v, want every change in order: %v", got, want)
	}
}

// testElectionResign: a candidate blocked in Campaign leads within the
// backend's declared hand-off time after the leader resigns.
func testElectionResign(t TB, e *env) {
	leader := e.election(&election.Options{TTL: longTTL})
	el := e.election(&election.Options{TTL: longTTL})
	tm, err := leader.Campaign(e.ctx, "first")
	mustNil(t, err, "Campaign")
	next := make(chan *election.Term, 1)
	cerr := make(chan error, 1)
	go func() {
		t2, err := el.Campaign(e.ctx, "second")
		if err != nil {
			cerr <- err
			return
		}
		next <- t2
	}()
	e.waitQueued(t, e.name("election"), 1, 200*time.Millisecond)
	bound := e.margin
	if e.caps.ReleaseWake > 0 {
		bound = e.caps.ReleaseWake + promiseTol(e.caps.ReleaseWake)
	}
	resigned := time.Now()
	mustNil(t, tm.Resign(e.ctx), "Resign")
	e.waiting("the waiting candidate to lead after Resign")
	select {
	case t2 := <-next:
		took := time.Since(resigned)
		defer t2.Resign(e.ctx)
		if took > bound {
			t.Fatalf("next leader after %v, over the %v bound (declared ReleaseWake %v)", took, bound, e.caps.ReleaseWake)
		}
		e.checkFence(t, tm.Fence(), t2.Fence(), "term after Resign")
	case err := <-cerr:
		t.Fatalf("Campaign: %v", err)
	case <-e.ctx.Done():
		t.Fatalf("no leader after Resign")
	}
}

// testElectionFrozen: a leader whose renewals stop (a frozen process) is
// replaced no earlier than its ValidUntil (beyond BreakOverlap), learns
// that its term ended, and its write carrying the old term is refused by
// a claim-first resource.
func testElectionFrozen(t TB, e *env) {
	frozen := e.election(&election.Options{TTL: e.ttl, AutoRenew: fencelock.Bool(false)})
	healthy := e.election(&election.Options{TTL: longTTL})
	var res guard.Counter
	a, err := frozen.Campaign(e.ctx, "frozen")
	mustNil(t, err, "Campaign")
	va, err := res.Claim(e.ctx, a.Fence())
	mustNil(t, err, "the frozen leader's Claim")
	e.waiting("a new leader after the frozen leader's TTL")
	b, err := healthy.Campaign(e.ctx, "healthy")
	mustNil(t, err, "Campaign of the next candidate")
	elected := time.Now()
	defer b.Resign(e.ctx)
	if vu := a.ValidUntil(); elected.Before(vu.Add(-e.caps.BreakOverlap)) {
		t.Fatalf("new leader elected %v before the frozen leader's ValidUntil", vu.Sub(elected))
	}
	e.checkFence(t, a.Fence(), b.Fence(), "term after the frozen leader's")
	vb, err := res.Claim(e.ctx, b.Fence())
	mustNil(t, err, "the new leader's Claim")
	mustNil(t, res.WriteClaimed(e.ctx, b.Fence(), vb+1), "the new leader's write")
	if !waitDone(a.Lease(), e.margin) {
		t.Fatalf("the frozen leader's term has not ended %v after a new leader was elected", e.margin)
	}
	mustIs(t, a.Err(), fencelock.ErrLeaseLost, "the frozen leader's Err")
	if err := res.WriteClaimed(e.ctx, a.Fence(), va+1); !errors.Is(err, guard.ErrStale) {
		t.Fatalf("the frozen leader's write with term %d: %v, want guard.ErrStale", a.Fence(), err)
	}
	if e.caps.Inspect.Supported && e.caps.Inspect.Label {
		ld, err := healthy.Leader(e.ctx)
		mustNil(t, err, "Leader")
		if ld.Value != "healthy" || e.caps.Inspect.Fence && ld.Term != b.Fence() {
			t.Fatalf("Leader: %+v, want healthy in term %d", ld, b.Fence())
		}
	}
}

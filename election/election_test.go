package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/election"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newElection(t *testing.T, s *memory.Store, opts *election.Options) *election.Election {
	t.Helper()
	c, err := memory.New(s, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e, err := election.New(c, "leader", opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestNewRejectsBadInput(t *testing.T) {
	c, err := memory.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name string
		opts *election.Options
	}{{"", nil}, {"x", &election.Options{TTL: -1}}, {"x", &election.Options{PollInterval: -1}}} {
		if _, err := election.New(c, tc.name, tc.opts); !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("New(%q, %+v): %v, want ErrInvalid", tc.name, tc.opts, err)
		}
	}
}

// TestOneLeaderAndRisingTerms: a second candidate waits while the first
// leads, leads after Resign with a greater term, and Leader reports each
// one's value and term; Proclaim changes the value, not the term.
func TestOneLeaderAndRisingTerms(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := memory.NewStore()
	ea, eb := newElection(t, s, nil), newElection(t, s, nil)
	if _, err := ea.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	a, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	bt := make(chan *election.Term, 1)
	go func() {
		b, err := eb.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		bt <- b
	}()
	ld, err := eb.Leader(ctx)
	if err != nil || ld.Value != "a" || ld.Term != a.Fence() || ld.ValidFor <= 0 {
		t.Fatalf("Leader while a leads: %+v, %v", ld, err)
	}
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	ld2, err := eb.Leader(ctx)
	if err != nil || ld2.Value != "a2" || ld2.Term != a.Fence() || !ld2.Since.Equal(ld.Since) || a.Value() != "a2" {
		t.Fatalf("Leader after Proclaim: %+v, %v (before: %+v)", ld2, err, ld)
	}
	select {
	case <-bt:
		t.Fatal("b was elected while a leads")
	default:
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-bt
	if b == nil {
		t.FailNow()
	}
	defer b.Resign(ctx)
	if b.Fence() <= a.Fence() {
		t.Fatalf("b's term %d is not greater than a's %d", b.Fence(), a.Fence())
	}
	if !errors.Is(a.Err(), fencelock.ErrReleased) {
		t.Fatalf("a's Err after Resign: %v", a.Err())
	}
	if err := a.Proclaim(ctx, "late"); !errors.Is(err, fencelock.ErrReleased) {
		t.Fatalf("Proclaim after Resign: %v, want ErrReleased", err)
	}
}

// TestObserveInOrderAndCoalesced: a prompt reader sees every leader in
// order; a reader that reads late gets only the latest.
func TestObserveInOrderAndCoalesced(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s := memory.NewStore()
	obs := newElection(t, s, &election.Options{PollInterval: 5 * time.Millisecond})
	cand := newElection(t, s, nil)
	prompt := obs.Observe(ctx)
	slowCtx, stopSlow := context.WithCancel(ctx)
	defer stopSlow()
	slow := obs.Observe(slowCtx)
	var terms []fencelock.Fence
	for i, v := range []string{"a", "b", "c"} {
		tm, err := cand.Campaign(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		ld := <-prompt
		if ld.Value != v || ld.Term != tm.Fence() {
			t.Fatalf("change %d: observed %+v, want %s in term %d", i, ld, v, tm.Fence())
		}
		terms = append(terms, tm.Fence())
		if err := tm.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	last, err := cand.Campaign(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	defer last.Resign(ctx)
	if ld := <-prompt; ld.Term != last.Fence() {
		t.Fatalf("prompt reader: %+v, want term %d", ld, last.Fence())
	}
	// The slow reader reads only now, after four changes: it gets the
	// latest, with at most one older change (the one pending when it
	// last polled) before it, never the history.
	var got []election.Leader
	for ld := range slow {
		got = append(got, ld)
		if ld.Term == last.Fence() {
			break
		}
	}
	if len(got) == 0 || len(got) > 2 || got[len(got)-1].Value != "d" || len(got) == 2 && got[0].Term >= got[1].Term {
		t.Fatalf("slow reader got %+v, want at most one older leader then d (term %d); terms were %v", got, last.Fence(), terms)
	}
	stopSlow()
	for range slow {
	} // closed when its ctx ends
}

// TestRunReleaseOnCancelHandsOver: Run with ReleaseOnCancel frees the
// election at once when its ctx ends; without it the next leader waits for
// the TTL.
func TestRunReleaseOnCancelHandsOver(t *testing.T) {
	for _, release := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		s := memory.NewStore()
		const ttl = 400 * time.Millisecond
		e1 := newElection(t, s, &election.Options{TTL: ttl})
		e2 := newElection(t, s, &election.Options{TTL: ttl})
		runCtx, stop := context.WithCancel(ctx)
		started := make(chan *election.Term, 1)
		var stopped, newLeader = make(chan struct{}), make(chan election.Leader, 8)
		done := make(chan error, 1)
		go func() {
			done <- e1.Run(runCtx, election.Config{
				Value:            "one",
				OnStartedLeading: func(c context.Context, tm *election.Term) { started <- tm; <-c.Done() },
				OnStoppedLeading: func() { close(stopped) },
				OnNewLeader:      func(l election.Leader) { newLeader <- l },
				ReleaseOnCancel:  release,
			})
		}()
		tm := <-started
		if ld := <-newLeader; ld.Term != tm.Fence() || ld.Value != "one" {
			t.Fatalf("OnNewLeader: %+v, want one in term %d", ld, tm.Fence())
		}
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after cancel: %v", err)
		}
		<-stopped
		t0 := time.Now()
		t2, err := e2.Campaign(ctx, "two")
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		if release && took > ttl/2 {
			t.Errorf("ReleaseOnCancel: next leader after %v, want at once", took)
		}
		if !release && took < ttl/2 {
			t.Errorf("without ReleaseOnCancel: next leader after %v, before the %v TTL", took, ttl)
		}
		if t2.Fence() <= tm.Fence() {
			t.Errorf("next term %d not above %d", t2.Fence(), tm.Fence())
		}
		_ = t2.Resign(ctx)
		cancel()
	}
}

// TestRunReturnsWhenLeadershipLost: the store drops the term; Run's
// worker context ends and Run returns ErrLeaseLost.
func TestRunReturnsWhenLeadershipLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := memory.NewStore()
	e := newElection(t, s, nil)
	err := e.Run(ctx, election.Config{OnStartedLeading: func(c context.Context, tm *election.Term) {
		s.Expire("leader")
		<-c.Done()
	}})
	if !errors.Is(err, fencelock.ErrLeaseLost) {
		t.Fatalf("Run after the store dropped the term: %v, want ErrLeaseLost", err)
	}
}

// TestUnsupportedLocker: a Locker that cannot inspect makes Leader fail
// with errors.ErrUnsupported and Observe close at once.
func TestUnsupportedLocker(t *testing.T) {
	c, err := memory.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := election.New(lockerOnly{c}, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(t.Context()); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Leader: %v", err)
	}
	if _, ok := <-e.Observe(t.Context()); ok {
		t.Fatal("Observe sent a leader")
	}
}

type lockerOnly struct{ fencelock.Locker }

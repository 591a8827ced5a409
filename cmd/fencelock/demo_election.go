package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/guard"
)

// runDemoElection: `fencelock demo election`. A leader pauses past its
// TTL (its renewals stop, as a frozen process's do), another candidate is
// elected with a higher term, and the paused leader's write carrying its
// old term is refused by the resource; then a leader is killed (its
// renewals stop and its connections close without a release) and the
// failover is timed.
func runDemoElection(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo election", flag.ContinueOnError)
	var sf storeFlags
	sf.register(fs)
	ttl := fs.Duration("ttl", 500*time.Millisecond, "term (lease) TTL (raised to the store's minimum)")
	all := fs.Bool("all", false, "time the failover after a leader is killed on every backend, each on a stock server started as compare starts it (a table)")
	runs := fs.Int("runs", 5, "with --all: leader kills timed per backend")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *all {
		if sf.url != "" {
			fmt.Fprintln(os.Stderr, "fencelock demo election: --all starts its own servers: drop --url")
			return usageError{fmt.Errorf("--all with --url")}
		}
		if *runs <= 0 {
			return usageError{errors.New("--runs must be positive")}
		}
		return failoverTable(ctx, *ttl, *runs)
	}
	url, cleanup, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cs, prefix, closeAll, err := openPrefixedClients(ctx, url, "demo-election", 3)
	if err != nil {
		return err
	}
	defer closeAll()
	d := electionDemo{cs: cs, ttl: demoTTL(cs[0], *ttl), out: os.Stdout}
	caps := cs[0].Capabilities()
	fmt.Printf("fencelock demo election on %s (%s backend, terms: %s fences, TTL %v)\n\n", url, caps.Backend, caps.Fence, d.ttl)
	if _, err := d.paused(ctx); err != nil {
		return err
	}
	fmt.Println()
	took, err := d.killed(ctx, url, prefix)
	if err != nil {
		return err
	}
	fmt.Printf("\nresult: the paused leader's stale write was refused; after a leader was killed, the next leader took over in %v (TTL %v)\n", took.Round(time.Millisecond), d.ttl)
	return nil
}

type electionDemo struct {
	cs  []*fencelock.Client // A, B, the observer
	ttl time.Duration
	out io.Writer
	t0  time.Time
}

func (d *electionDemo) say(who, format string, args ...any) {
	fmt.Fprintf(d.out, "  %6dms  %-8s  %s\n", time.Since(d.t0).Milliseconds(), who, fmt.Sprintf(format, args...))
}

// observe prints each leader change until ctx ends; wait waits for it.
func (d *electionDemo) observe(ctx context.Context, name string) (wait func(), err error) {
	obs, err := election.New(d.cs[2], name, &election.Options{PollInterval: 20 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	ch := obs.Observe(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ld := range ch {
			d.say("observer", "leader is %q, term %d (valid for %v as the store sees it)", ld.Value, ld.Term, ld.ValidFor)
		}
	})
	return wg.Wait, nil
}

// pausedOutcome is what became of a leader paused past its TTL.
type pausedOutcome struct {
	oldTerm, newTerm fencelock.Fence
	replacedAfter    time.Duration // the paused leader elected → the next one elected
}

// paused: a leader pauses past its TTL, another is elected with a higher
// term, and the paused leader's write carrying its old term must be
// refused by the resource (guard.ErrStale); an error says it was not.
func (d *electionDemo) paused(ctx context.Context) (pausedOutcome, error) {
	const name = "scheduler"
	var po pausedOutcome
	fmt.Fprintln(d.out, "a leader pauses past its TTL:")
	d.t0 = time.Now()
	octx, stop := context.WithCancel(ctx)
	wait, err := d.observe(octx, name)
	if err != nil {
		stop()
		return po, err
	}
	defer func() { stop(); wait() }()
	// A's renewals stop for the pause, as a frozen process's do.
	ea, err := election.New(d.cs[0], name, &election.Options{TTL: d.ttl, AutoRenew: fencelock.Bool(false)})
	if err != nil {
		return po, err
	}
	eb, err := election.New(d.cs[1], name, &election.Options{TTL: d.ttl})
	if err != nil {
		return po, err
	}
	var schedule guard.Counter
	a, err := ea.Campaign(ctx, "node-a")
	if err != nil {
		return po, err
	}
	elected := time.Now()
	po.oldTerm = a.Fence()
	va, err := schedule.Claim(ctx, a.Fence())
	if err != nil {
		return po, err
	}
	d.say("node-a", "leads in term %d, reads the schedule (v%d), then pauses", a.Fence(), va)
	b, err := eb.Campaign(ctx, "node-b")
	if err != nil {
		return po, err
	}
	po.replacedAfter, po.newTerm = time.Since(elected), b.Fence()
	defer b.Resign(context.WithoutCancel(ctx))
	vb, err := schedule.Claim(ctx, b.Fence())
	if err == nil {
		err = schedule.WriteClaimed(ctx, b.Fence(), vb+1)
	}
	if err != nil {
		return po, err
	}
	d.say("node-b", "elected in term %d once node-a's term ran out; writes v%d", b.Fence(), vb+1)
	<-a.Done() // already: its validity deadline passed during the pause
	err = schedule.WriteClaimed(ctx, a.Fence(), va+1)
	if !errors.Is(err, guard.ErrStale) {
		return po, fmt.Errorf("the paused leader's write with term %d was not refused: %v", a.Fence(), err)
	}
	d.say("node-a", "resumes and writes v%d with term %d: REFUSED (stale term); its term ended: %v", va+1, a.Fence(), a.Err())
	v, _ := schedule.Read(ctx)
	d.say("=", "schedule = v%d, written by term %d", v, schedule.Fence())
	if d.out == io.Discard {
		return po, nil // measuring: no observer output to wait for
	}
	// Let the observer print node-b before it stops.
	return po, d.seen(ctx, eb, b.Fence(), "node-b")
}

// seen waits (bounded) until Leader reports term (or value, where the
// store's Inspect cannot report the fence), so the observer, which polls
// at 20ms, has had its chance to print it.
func (d *electionDemo) seen(ctx context.Context, e *election.Election, term fencelock.Fence, value string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		if ld, err := e.Leader(ctx); err == nil && (ld.Term == term || (ld.Term == 0 && ld.Value == value)) {
			return sleepCtx(ctx, 60*time.Millisecond)
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// killed times a failover: a leader in another process (auto-renewing)
// is killed with SIGKILL while this process campaigns. mem:// lives in
// this process only: there the leader's renewals stop and its client
// closes instead, with no release.
func (d *electionDemo) killed(ctx context.Context, url, prefix string) (time.Duration, error) {
	const name = "controller"
	fmt.Fprintln(d.out, "a leader is killed:")
	d.t0 = time.Now()
	eb, err := election.New(d.cs[1], name, &election.Options{TTL: d.ttl})
	if err != nil {
		return 0, err
	}
	var kill func()
	if d.cs[0].Capabilities().Backend == "mem" {
		// A Client of its own, closed by the kill, so that the kill can
		// be repeated.
		c, err := client(ctx, url, &fencelock.Options{Prefix: prefix})
		if err != nil {
			return 0, err
		}
		defer c.Close()
		ea, err := election.New(c, name, &election.Options{TTL: d.ttl})
		if err != nil {
			return 0, err
		}
		a, err := ea.Campaign(ctx, "node-c")
		if err != nil {
			return 0, err
		}
		d.say("node-c", "leads in term %d (in this process: mem:// cannot be shared)", a.Fence())
		kill = func() { a.Lease().Abandon(); _ = c.Close() }
	} else {
		child, err := startLeaderChild(ctx, electionChildSpec{URL: url, Prefix: prefix, Name: name, Value: "node-c", TTL: d.ttl})
		if err != nil {
			return 0, err
		}
		defer child.kill()
		d.say("node-c", "leads in term %d (process %d)", child.term, child.cmd.Process.Pid)
		kill = child.kill
	}
	next := make(chan *election.Term, 1)
	cerr := make(chan error, 1)
	go func() {
		b, err := eb.Campaign(ctx, "node-b")
		if err != nil {
			cerr <- err
			return
		}
		next <- b
	}()
	if err := sleepCtx(ctx, d.ttl/2); err != nil { // node-c works a while
		return 0, err
	}
	killed := time.Now()
	kill()
	d.say("node-c", "killed (SIGKILL: no release)")
	select {
	case b := <-next:
		took := time.Since(killed)
		defer b.Resign(context.WithoutCancel(ctx))
		d.say("node-b", "elected in term %d, %v after the kill", b.Fence(), took.Round(time.Millisecond))
		return took, nil
	case err := <-cerr:
		return 0, err
	}
}

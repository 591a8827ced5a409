package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/guard"
)

func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var sf storeFlags
	sf.register(fs)
	ttl := fs.Duration("ttl", 500*time.Millisecond, "lease TTL (raised to the store's minimum)")
	if err := parse(fs, args); err != nil {
		return err
	}
	url, cleanup, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cs, closeAll, err := openClients(ctx, url, "demo", 2)
	if err != nil {
		return err
	}
	defer closeAll()
	a, b := cs[0], cs[1]
	d := demo{a: a, b: b, ttl: demoTTL(a, *ttl), out: os.Stdout}
	fmt.Printf("fencelock demo on %s (%s backend, fence: %s, TTL %v)\n\n", url, a.Capabilities().Backend, a.Capabilities().Fence, d.ttl)
	unfenced, err := d.run(ctx, "unfenced", false)
	if err != nil {
		return err
	}
	fenced, err := d.run(ctx, "claim-first", true)
	if err != nil {
		return err
	}
	fmt.Printf("\nresult: unfenced counter = %d (B's increment lost), claim-first counter = %d (nothing lost)\n", unfenced, fenced)
	return nil
}

type demo struct {
	a, b *fencelock.Client
	ttl  time.Duration
	out  io.Writer
	t0   time.Time
}

func (d *demo) say(who, format string, args ...any) {
	fmt.Fprintf(d.out, "  %6dms  %s  %s\n", time.Since(d.t0).Milliseconds(), who, fmt.Sprintf(format, args...))
}

// run plays the story once and returns the counter's final value: A takes
// the lock and reads, stalls past its TTL (a GC pause, a frozen VM); B takes
// the lock and increments; A wakes up and writes its stale increment.
func (d *demo) run(ctx context.Context, title string, fenced bool) (int64, error) {
	var res guard.Counter
	name := "counter-" + title
	noRenew := &fencelock.AcquireOptions{TTL: d.ttl, AutoRenew: fencelock.Bool(false)}
	d.t0 = time.Now()
	fmt.Fprintf(d.out, "%s:\n", title)
	la, err := d.a.Acquire(ctx, name, noRenew)
	if err != nil {
		return 0, err
	}
	var va int64
	if fenced {
		va, err = res.Claim(ctx, la.Fence())
	} else {
		va, err = res.Read(ctx)
	}
	if err != nil {
		return 0, err
	}
	d.say("A", "takes the lock (fence %d), reads %d, then stalls past its %v TTL", la.Fence(), va, d.ttl)

	bDone := make(chan error, 1)
	go func() { bDone <- d.workerB(ctx, &res, name, fenced) }()
	// A's stall: 1.5×TTL, and long enough for B to finish (the story's order).
	time.Sleep(d.ttl + d.ttl/2)
	if err := <-bDone; err != nil {
		return 0, err
	}
	if fenced {
		err = res.WriteClaimed(ctx, la.Fence(), va+1)
	} else {
		err = res.Write(ctx, va+1)
	}
	switch {
	case errors.Is(err, guard.ErrStale):
		d.say("A", "wakes up, writes %d with fence %d: REJECTED (stale fence); its lease: %v", va+1, la.Fence(), la.Err())
		if err := d.retryA(ctx, &res, name); err != nil {
			return 0, err
		}
	case err != nil:
		return 0, err
	default:
		d.say("A", "wakes up, writes %d: accepted, B's increment is overwritten", va+1)
	}
	_ = la.Release(ctx) // ErrLeaseLost: it expired long ago
	v, err := res.Read(ctx)
	d.say("=", "counter = %d", v)
	return v, err
}

func (d *demo) workerB(ctx context.Context, res *guard.Counter, name string, fenced bool) error {
	lb, err := d.b.Acquire(ctx, name, &fencelock.AcquireOptions{TTL: d.ttl})
	if err != nil {
		return err
	}
	defer lb.Release(ctx)
	var v int64
	if fenced {
		v, err = res.Claim(ctx, lb.Fence())
	} else {
		v, err = res.Read(ctx)
	}
	if err != nil {
		return err
	}
	if fenced {
		err = res.WriteClaimed(ctx, lb.Fence(), v+1)
	} else {
		err = res.Write(ctx, v+1)
	}
	d.say("B", "takes the expired lock (fence %d), reads %d, writes %d", lb.Fence(), v, v+1)
	return err
}

// retryA: a rejected worker knows its write failed; it re-acquires and
// redoes its increment on fresh data.
func (d *demo) retryA(ctx context.Context, res *guard.Counter, name string) error {
	l, err := d.a.Acquire(ctx, name, &fencelock.AcquireOptions{TTL: d.ttl})
	if err != nil {
		return err
	}
	defer l.Release(ctx)
	v, err := res.Claim(ctx, l.Fence())
	if err != nil {
		return err
	}
	d.say("A", "re-acquires (fence %d), reads %d, writes %d", l.Fence(), v, v+1)
	return res.WriteClaimed(ctx, l.Fence(), v+1)
}

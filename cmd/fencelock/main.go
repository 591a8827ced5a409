// Command fencelock demonstrates, checks and measures distributed locks
// with fencing tokens on any store fencelock supports.
//
//	fencelock demo        [--url URL]   the stalled-worker story, unfenced vs claim-first
//	fencelock demo election [--url URL] a paused leader replaced, its old-term write refused; failover timed
//	fencelock inspect     --url URL NAME…  who holds a lock: label, fence, remaining TTL, waiters
//	fencelock conformance [--url URL]   the shared conformance suite, a line per check
//	fencelock lostupdates [--url URL]   lost updates by stall rate × fencing mode
//	fencelock bench       [--url URL]   acquire+release, hand-off and contention numbers
//	fencelock compare     [--url URL]…  all stores side by side → docs/comparison.md
//	fencelock compare --peers-only      only its "Next to the peers" section, from docs/bench/peers.json
//	fencelock torture     [--url URL]   random operations under random faults, the history checked
//
// Without --url each command starts an embedded default store and says
// where it runs. `compare --peers-only` measures nothing and starts no
// server: after `make bench-peers` it re-renders the "Next to the peers"
// section of the existing document at --out from --peers and leaves every
// other byte of it as it was; it redraws img/contention.svg (drawn from
// the peers file alone) and leaves img/handoff.svg.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/goredislog"
)

const usage = `usage: fencelock <command> [flags]

commands:
  demo         worker A stalls past its TTL while B takes the lock: unfenced vs claim-first
  demo election  a leader pauses past its TTL: replaced, its old-term write refused
  inspect      who holds a lock (label, fence, remaining TTL, waiters); --watch, --json
  conformance  run the conformance suite against a store (a line per check)
  lostupdates  the lost-update table: stall rate × {no fencing, write-only, claim-first}
  bench        acquire+release latency, hand-off latency, contended throughput
  compare      all of the above across backends → docs/comparison.md
               (--peers-only: re-render only its "Next to the peers" section
               from docs/bench/peers.json after make bench-peers; measures nothing)
  torture      random operations while faults are injected; a checker judges the history

Every command takes --url URL (e.g. mem://, redis://127.0.0.1:6379/0,
etcd://127.0.0.1:2379/locks, postgres://user@127.0.0.1:5432/db); without it an
embedded store is started. Run 'fencelock <command> -h' for its flags.
`

func main() {
	conformance.MaybeRunChild() // the process-freeze check re-executes this binary
	maybeRunElectionChild()     // demo election's leader process, killed by the demo
	// go-redis logs the errors it also returns (a primary the partition
	// checks cut off, a dial that failed) to stderr; the CLI reports them.
	goredislog.To(nil)
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "demo":
		if len(args) > 0 && args[0] == "election" {
			err = runDemoElection(ctx, args[1:])
		} else {
			err = runDemo(ctx, args)
		}
	case "inspect":
		err = runInspect(ctx, args)
	case "conformance":
		err = runConformance(ctx, args)
	case "lostupdates":
		err = runLostUpdates(ctx, args)
	case "bench":
		err = runBench(ctx, args)
	case "compare":
		err = runCompare(ctx, args)
	case "torture":
		err = runTorture(ctx, args)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "fencelock: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return // 'fencelock <command> -h' printed its flags
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "fencelock:", err)
		os.Exit(1)
	}
}

// usageError: flag parsing failed and the flag package already said why.
type usageError struct{ error }

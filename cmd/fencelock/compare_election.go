package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/conformance"
)

// failoverResult is one backend's leader-election measurements
// (measureFailover).
type failoverResult struct {
	ttl    time.Duration   // the term TTL used: the one asked, or the store's minimum
	runs   []time.Duration // leader killed (SIGKILL) → new leader elected, per run
	err    error           // the kill runs failed (runs has those done before)
	paused pausedOutcome
	// pausedErr: the paused-leader run failed, or its stale write was
	// not refused.
	pausedErr error
}

// measureFailover measures leader election on url: once a leader paused
// past its TTL (replaced, and its write carrying the old term refused by
// the guard), then runs times a leader process killed with SIGKILL while
// another candidate campaigns (the time until that one is elected). The
// TTL is ttl, raised to the store's minimum. `demo election --all` and
// `compare` both use it.
func measureFailover(ctx context.Context, url string, ttl time.Duration, runs int) failoverResult {
	var r failoverResult
	cs, prefix, closeAll, err := openPrefixedClients(ctx, url, "failover", 3)
	if err != nil {
		r.err, r.pausedErr = err, err
		return r
	}
	defer closeAll()
	d := electionDemo{cs: cs, ttl: demoTTL(cs[0], ttl), out: io.Discard}
	r.ttl = d.ttl
	r.paused, r.pausedErr = d.paused(ctx)
	for range runs {
		took, err := d.killed(ctx, url, prefix)
		if err != nil {
			r.err = err
			break
		}
		r.runs = append(r.runs, took)
	}
	return r
}

// failoverRow is one backend's row of the failover table.
type failoverRow struct {
	label, server string
	failoverResult
}

// failoverTable times, on every backend's stock server (started as
// compare starts it), how long after a leader process is killed a waiting
// candidate is elected, runs times each, and prints the table.
func failoverTable(ctx context.Context, ttl time.Duration, runs int) error {
	dir, err := os.MkdirTemp("", "fencelock-failover-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var rows []failoverRow
	for _, b := range compareBackends {
		url, server, stop, err := b.start(ctx, dir)
		if err != nil {
			rows = append(rows, failoverRow{label: b.label, failoverResult: failoverResult{err: err, pausedErr: err}})
			continue
		}
		r := failoverRow{label: b.label, server: server, failoverResult: measureFailover(ctx, url, ttl, runs)}
		stop()
		rows = append(rows, r)
		fmt.Fprintf(os.Stderr, "%s: %s (TTL %v)\n", r.label, failoverCell(r.failoverResult), r.ttl)
	}
	var b bytes.Buffer
	renderFailoverRows(&b, rows, ttl)
	_, err = os.Stdout.Write(b.Bytes())
	return err
}

// failoverCell is "median / worst over n runs", or why not.
func failoverCell(r failoverResult) string {
	if len(r.runs) == 0 {
		return "not measured: " + cellErr(r.err)
	}
	s := fmt.Sprintf("%v / %v (%d runs)", conformance.Percentile(r.runs, 0.5).Round(time.Millisecond), slices.Max(r.runs).Round(time.Millisecond), len(r.runs))
	if r.err != nil {
		s += "; then failed: " + cellErr(r.err)
	}
	return s
}

// pausedCell says what became of the paused leader.
func pausedCell(r failoverResult) string {
	p := r.paused
	switch {
	case r.pausedErr != nil && p.newTerm == 0:
		return "not measured: " + cellErr(r.pausedErr)
	case r.pausedErr != nil:
		return fmt.Sprintf("replaced (term %d → %d); **FAILED**: %s", p.oldTerm, p.newTerm, cellErr(r.pausedErr))
	}
	return fmt.Sprintf("replaced %v after it was elected (term %d → %d); its write with term %d **refused** (guard.ErrStale)", p.replacedAfter.Round(time.Millisecond), p.oldTerm, p.newTerm, p.oldTerm)
}

// cellErr is err as one table cell's text.
func cellErr(err error) string {
	if err == nil {
		return "no result"
	}
	return strings.ReplaceAll(strings.ReplaceAll(err.Error(), "|", "/"), "\n", " ")
}

// ttlCell names the TTL, and why when it is the store's minimum.
func ttlCell(r failoverRow, asked time.Duration) string {
	switch {
	case r.ttl == 0:
		return "—"
	case asked > 0 && r.ttl > asked:
		if r.label == "zookeeper" {
			return fmt.Sprintf("%v (the store's minimum session)", r.ttl)
		}
		return fmt.Sprintf("%v (the store's minimum)", r.ttl)
	}
	return r.ttl.String()
}

// renderFailoverRows writes the failover table, one row per backend;
// asked is the TTL asked for.
func renderFailoverRows(b *bytes.Buffer, rows []failoverRow, asked time.Duration) {
	var cells [][]string
	for _, r := range rows {
		cells = append(cells, []string{r.label, ttlCell(r, asked), failoverCell(r.failoverResult), pausedCell(r.failoverResult)})
	}
	mdTable(b, []string{"backend", "term TTL", "leader killed → new leader: median / worst", "leader paused past its TTL"}, cells)
}

// renderElection is the document's leader-election section.
func (d *compareDoc) renderElection(b *bytes.Buffer) {
	b.WriteString("## Leader election: failover\n\n")
	if d.cfg.failoverRuns <= 0 {
		b.WriteString("Not measured in this generation (`--failover-runs 0`).\n\n")
		return
	}
	fmt.Fprintf(b, "Package `election` on each store, measured in this run (`measureFailover`, also behind `fencelock demo election --all`). Killed: a leader in another process (auto-renewing) gets SIGKILL while a candidate here campaigns — no release, its connections closed by the kernel (mem lives in one process: there the leader's renewals stop and its Client closes); the time is from the kill to the candidate elected, median and worst of %d runs. Term TTL %v, or the store's minimum where that is higher (etcd's lease, ZooKeeper's session). Paused: a leader stops renewing (as a frozen process does), the candidate is elected with a higher term once the old term runs out, and the paused leader's write with its old term reaches a resource behind `guard`, which refuses it.\n\n", d.cfg.failoverRuns, d.cfg.failoverTTL)
	var rows []failoverRow
	for _, r := range d.results {
		fr := r.failover
		if r.err != nil && r.url == "" {
			fr = failoverResult{err: r.err, pausedErr: r.err}
		}
		rows = append(rows, failoverRow{label: r.label, failoverResult: fr})
	}
	renderFailoverRows(b, rows, d.cfg.failoverTTL)
	b.WriteString("A killed leader's term ends when its lease runs out (about the TTL), except on Postgres, where the advisory lock ends with the leader's session, which the server closes as soon as the kernel resets the killed process's connection. What an election without a fence gives for comparison:\n\n")
	b.WriteString("- **client-go `leaderelection`** (Kubernetes): its documentation says it does not guarantee that only one client is acting as leader (it relies on timestamps and clock skew), and it hands the leader no token: a paused leader that resumes after losing its lease keeps acting until it notices, and a resource cannot tell its writes from the new leader's.\n")
	b.WriteString("- **etcd `concurrency.Election`**: a leader is the owner of a key under a lease; when the lease expires another is elected, but a resource gets nothing it can check: a paused leader's writes are not refused unless the application itself compares the key's revision in each write (an etcd transaction on etcd data only).\n\n")
	var refused, not []string
	for _, r := range rows {
		if r.paused.newTerm != 0 && r.pausedErr == nil {
			refused = append(refused, r.label)
		} else {
			not = append(not, r.label)
		}
	}
	fmt.Fprintf(b, "With package `election` every term is a fence (`Term.Fence()`), which a resource behind `guard` checks: the paused leader's write was refused on %s", strings.Join(refused, ", "))
	if len(refused) == 0 {
		b.WriteString("no backend")
	}
	if len(not) > 0 {
		fmt.Fprintf(b, "; not measured or failed on %s (see the table)", strings.Join(not, ", "))
	}
	b.WriteString(".\n\n")
}

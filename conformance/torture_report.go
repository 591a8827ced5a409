package conformance

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// windowPad widens a violation's window in reports, for context.
const windowPad = 50 * time.Millisecond

// Window returns the operations and faults of h within v's window (its
// From–To, widened by a little), on v's name (a register's operations
// count as their lock name's).
func (h *History) Window(v Violation) ([]Op, []Fault) {
	from, to := v.From-windowPad, v.To+windowPad
	lock := lockOf(v.Name)
	var ops []Op
	for _, o := range h.Ops() {
		if lockOf(o.Name) != lock || o.Invoke > to || max(o.Complete, o.End) < from {
			continue
		}
		ops = append(ops, o)
	}
	var fs []Fault
	for _, f := range h.Faults() {
		if f.Start <= to && f.End >= from {
			fs = append(fs, f)
		}
	}
	return ops, fs
}

// lockOf is the lock name a register belongs to ("cf/n0" → "n0").
func lockOf(name string) string {
	if _, n, ok := strings.Cut(name, "/"); ok {
		return n
	}
	return name
}

// WriteReport writes the result: a summary line and, for each
// violation, its window of the history and how to replay the schedule.
func (r *TortureResult) WriteReport(w io.Writer, replay string) {
	m := r.Meta
	fmt.Fprintf(w, "torture on %s, seed %d: %d operations, %d faults in %v; %d violations\n",
		m.Backend, m.Seed, r.Ops(), r.FaultCount(), r.Elapsed.Round(time.Millisecond), len(r.Violations))
	for i, v := range r.Violations {
		if i == 5 {
			fmt.Fprintf(w, "... and %d more\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(w, "VIOLATION %s\n", v)
		ops, fs := r.History.Window(v)
		writeWindow(w, ops, fs, v)
	}
	if len(r.Violations) > 0 && replay != "" {
		fmt.Fprintf(w, "replay the schedule (seed %d): %s\n", m.Seed, replay)
	}
}

func writeWindow(w io.Writer, ops []Op, fs []Fault, v Violation) {
	mark := map[int64]bool{}
	for _, id := range v.Ops {
		mark[id] = true
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%9.3fs", d.Seconds()) }
	for _, f := range fs {
		fmt.Fprintf(w, "      %s–%s fault %s %s %s\n", ms(f.Start), ms(f.End), f.Kind, f.Target, f.Name)
	}
	for _, o := range ops {
		star := " "
		if mark[o.ID] {
			star = "*"
		}
		line := fmt.Sprintf("  %s %s–%s op %-5d w%d c%d %-18s %-8s %-7s", star, ms(o.Invoke), ms(o.Complete), o.ID, o.Worker, o.Client, o.Kind, o.Name, o.Result)
		if o.Fence != 0 {
			line += fmt.Sprintf(" fence=%d", o.Fence)
		}
		if o.Lease != 0 {
			line += fmt.Sprintf(" lease=%d", o.Lease)
		}
		switch o.Kind {
		case OpClaim, OpRead:
			line += fmt.Sprintf(" value=%d", o.Value)
		case OpWriteClaimed, OpWriteIfNotOlder:
			line += fmt.Sprintf(" write=%d", o.Arg)
		}
		if o.grant() {
			line += fmt.Sprintf(" valid-until=%s held-until=%s", ms(o.ValidUntil), ms(o.End))
		}
		fmt.Fprintln(w, line)
	}
}

// WriteFiles writes the history to historyPath (JSONL, "" for none) and
// a timeline to svgPath ("" for none): the first violation's window, or
// the whole run if there is none.
func (r *TortureResult) WriteFiles(historyPath, svgPath string) error {
	if historyPath != "" {
		var b strings.Builder
		if err := r.History.WriteJSONL(&b); err != nil {
			return err
		}
		if err := os.WriteFile(historyPath, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write history: %w", err)
		}
	}
	if svgPath != "" {
		var from, to time.Duration
		if len(r.Violations) > 0 {
			v := r.Violations[0]
			pad := max(r.Meta.TTL, time.Second)
			from, to = max(v.From-pad, 0), v.To+pad
		}
		var b strings.Builder
		if err := r.History.WriteSVG(&b, from, to, r.Violations); err != nil {
			return err
		}
		if err := os.WriteFile(svgPath, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write timeline: %w", err)
		}
	}
	return nil
}

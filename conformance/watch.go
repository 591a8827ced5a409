package conformance

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
)

// watch is one check's deadline and its "what I am waiting for" note.
type watch struct {
	start   time.Time
	changed chan struct{} // the deadline moved

	mu       sync.Mutex
	deadline time.Time
	note     string
}

func newWatch(deadline time.Time) *watch {
	return &watch{start: time.Now(), deadline: deadline, changed: make(chan struct{}, 1), note: "the check to start"}
}

// set records what the check is waiting for now.
func (w *watch) set(what string) {
	w.mu.Lock()
	w.note = what
	w.mu.Unlock()
}

func (w *watch) get() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.note
}

// extend moves the deadline (never blocks: changed holds one signal).
func (w *watch) extend(d time.Time) {
	w.mu.Lock()
	w.deadline = d
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *watch) until() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Until(w.deadline)
}

// left is the time to the deadline (a check sizes open-ended work by it).
func (e *env) left() time.Duration {
	if e.w == nil {
		return time.Minute
	}
	return e.w.until()
}

func (w *watch) total() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deadline.Sub(w.start)
}

// Dump limits: the goroutines that run fencelock code, at most this many,
// each cut to this many lines.
const (
	dumpMaxGoroutines = 12
	dumpMaxLines      = 24
)

// goroutineDump returns the stacks (runtime/pprof goroutine profile,
// debug=2) of the goroutines running fencelock or backend code, trimmed,
// leaving out the runner's own.
func goroutineDump() string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		return "goroutine dump: " + err.Error()
	}
	var b strings.Builder
	kept, skipped := 0, 0
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if !strings.Contains(g, "fencelock") || strings.Contains(g, "conformance.goroutineDump") ||
			strings.Contains(g, "conformance.runCheck(") && !strings.Contains(g, "conformance.runCheck.func") {
			continue
		}
		if kept == dumpMaxGoroutines {
			skipped++
			continue
		}
		kept++
		lines := strings.Split(strings.TrimSpace(g), "\n")
		if len(lines) > dumpMaxLines {
			lines = append(lines[:dumpMaxLines], fmt.Sprintf("\t... %d more lines", len(lines)-dumpMaxLines))
		}
		b.WriteString(strings.Join(lines, "\n"))
		b.WriteString("\n\n")
	}
	if skipped > 0 {
		fmt.Fprintf(&b, "... and %d more goroutines running fencelock code\n", skipped)
	}
	if kept == 0 {
		return "(no goroutine runs fencelock code)"
	}
	return "goroutines running fencelock code:\n" + b.String()
}

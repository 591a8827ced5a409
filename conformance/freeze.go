package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/election"
)

func init() {
	register(check{name: "ProcessFreeze", run: testProcessFreeze, ttls: 20})
}

// freezeEnv carries the child's instructions when the process-freeze check
// re-executes the running binary.
const freezeEnv = "FENCELOCK_FREEZE_CHILD"

type freezeSpec struct {
	URL, Prefix, Name string
	TTL               time.Duration
	// Election: the child campaigns on Name (package election) instead of
	// acquiring it, and reports its term.
	Election bool
	// Torture: the child is a torture worker's Client, driven over its
	// stdin (see torture_child.go).
	Torture bool
}

// MaybeRunChild runs the process-freeze child and exits if this process was
// started as one; otherwise it returns at once. A binary that runs the suite
// without package testing (like the fencelock CLI) calls it first in main.
func MaybeRunChild() {
	if runFreezeChildIfRequested() {
		os.Exit(0)
	}
}

func runFreezeChildIfRequested() bool {
	v := os.Getenv(freezeEnv)
	if v == "" {
		return false
	}
	var s freezeSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		say("ERROR", "bad spec: "+err.Error())
		os.Exit(0)
	}
	freezeChild(s)
	os.Exit(0)
	return true
}

func say(words ...any) {
	fmt.Fprintln(os.Stdout, append([]any{"FREEZE"}, words...)...)
}

// freezeChild acquires with auto-renew on, is frozen by the parent, and
// reports what it observes once resumed.
func freezeChild(s freezeSpec) {
	if s.Torture {
		tortureChild(s)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*s.TTL+60*time.Second)
	defer cancel()
	c, err := fencelock.DefaultURLMux().Open(ctx, s.URL, &fencelock.Options{Prefix: s.Prefix})
	if err != nil {
		say("ERROR", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	defer c.Close()
	if s.Election {
		frozenLeader(ctx, c, s)
		return
	}
	l, err := c.TryAcquire(ctx, s.Name, &fencelock.AcquireOptions{TTL: s.TTL})
	if err != nil {
		say("ERROR", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	say("ACQUIRED", l.Fence())
	// The parent freezes this process (SIGSTOP) now, for 2×TTL.
	select {
	case <-l.Done():
	case <-time.After(20*s.TTL + 30*time.Second):
	}
	say("ENDED", errors.Is(l.Err(), fencelock.ErrLeaseLost))
	err = l.Release(ctx)
	say("RELEASE", errors.Is(err, fencelock.ErrLeaseLost))
	// A resumed worker that does not check its lease writes anyway: the
	// parent applies the write to the guarded resource with this fence.
	say("WRITE", l.Fence())
}

// frozenLeader is freezeChild as a leader: it campaigns (auto-renew on),
// is frozen by the parent, and once resumed reports whether its term
// ended, what a Proclaim and a Resign return, and the term its write
// carries.
func frozenLeader(ctx context.Context, c *fencelock.Client, s freezeSpec) {
	el, err := election.New(c, s.Name, &election.Options{TTL: s.TTL})
	if err != nil {
		say("ERROR", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	t, err := el.Campaign(ctx, "frozen")
	if err != nil {
		say("ERROR", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	say("ACQUIRED", t.Fence(), t.ValidUntil().UnixNano())
	select { // the parent freezes this process now
	case <-t.Done():
	case <-time.After(20*s.TTL + 30*time.Second):
	}
	say("ENDED", errors.Is(t.Err(), fencelock.ErrLeaseLost))
	switch err := t.Proclaim(ctx, "frozen-again"); {
	case errors.Is(err, fencelock.ErrLeaseLost):
		say("PROCLAIM", "lost")
	case errors.Is(err, errors.ErrUnsupported):
		say("PROCLAIM", "unsupported")
	default:
		say("PROCLAIM", fmt.Sprintf("%q", fmt.Sprint(err)))
	}
	say("RELEASE", errors.Is(t.Resign(ctx), fencelock.ErrLeaseLost))
	say("WRITE", t.Fence())
}

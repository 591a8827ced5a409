package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencelock/fencelock"
)

// inspectRecord is one lock's state in --json output.
type inspectRecord struct {
	Name        string           `json:"name"`
	Held        bool             `json:"held"`
	Label       *string          `json:"label,omitempty"`        // omitted when the backend keeps no labels
	Fence       *fencelock.Fence `json:"fence,omitempty"`        // omitted when the backend cannot tell
	RemainingMS *int64           `json:"remaining_ms,omitempty"` // omitted when the backend cannot tell
	Waiters     *int             `json:"waiters,omitempty"`      // omitted when the backend cannot tell
	At          string           `json:"at"`
}

// runInspect: `fencelock inspect --url URL name…`.
func runInspect(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	url := fs.String("url", "", "store URL (required)")
	prefix := fs.String("prefix", "", "client prefix the names were locked under")
	watch := fs.Duration("watch", 0, "repeat every interval (e.g. 500ms) until interrupted")
	asJSON := fs.Bool("json", false, "one JSON object per lock per round, a line each")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: fencelock inspect --url URL [--prefix P] [--watch 1s] [--json] NAME…")
		fs.PrintDefaults()
	}
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError{err}
	}
	names := fs.Args()
	switch {
	case *url == "":
		fmt.Fprintln(os.Stderr, "fencelock inspect: --url is required")
		fs.Usage()
		return usageError{fmt.Errorf("no --url")}
	case len(names) == 0:
		fmt.Fprintln(os.Stderr, "fencelock inspect: name at least one lock")
		fs.Usage()
		return usageError{fmt.Errorf("no names")}
	case *watch < 0:
		fmt.Fprintln(os.Stderr, "fencelock inspect: --watch must be positive")
		return usageError{fmt.Errorf("negative --watch")}
	}
	c, err := client(ctx, *url, &fencelock.Options{Prefix: *prefix})
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		for _, n := range names {
			info, err := c.Inspect(ctx, n)
			if err != nil {
				return err
			}
			if err := printInfo(os.Stdout, c.Capabilities(), info, *asJSON); err != nil {
				return err
			}
		}
		if *watch == 0 {
			return nil
		}
		if err := sleepCtx(ctx, *watch); err != nil {
			return nil // interrupted: done watching
		}
	}
}

func printInfo(w io.Writer, caps fencelock.Capabilities, info fencelock.LockInfo, asJSON bool) error {
	ic := caps.Inspect
	if asJSON {
		r := inspectRecord{Name: info.Name, Held: info.Held, At: info.At.UTC().Format(time.RFC3339Nano)}
		if ic.Label {
			r.Label = &info.Label
		}
		if ic.Fence {
			r.Fence = &info.Fence
		}
		if ic.Remaining {
			ms := info.Remaining.Milliseconds()
			r.RemainingMS = &ms
		}
		if ic.Waiters {
			r.Waiters = &info.Waiters
		}
		return json.NewEncoder(w).Encode(r)
	}
	unknown := func(ok bool, v string) string {
		if !ok {
			return "?"
		}
		return v
	}
	waiters := unknown(ic.Waiters, fmt.Sprint(info.Waiters))
	if !info.Held {
		_, err := fmt.Fprintf(w, "%s: free (waiters %s)\n", info.Name, waiters)
		return err
	}
	_, err := fmt.Fprintf(w, "%s: held by %s, fence %s, remaining %s, waiters %s\n", info.Name,
		unknown(ic.Label, fmt.Sprintf("%q", info.Label)), unknown(ic.Fence, info.Fence.String()),
		unknown(ic.Remaining, info.Remaining.String()), waiters)
	return err
}

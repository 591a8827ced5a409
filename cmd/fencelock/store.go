package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/fencelock/fencelock"
)

// storeFlags are the flags every command shares.
type storeFlags struct {
	url string
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.url, "url", "", "store URL (default: an embedded store started for this run)")
}

// open resolves the store: --url, or the embedded default. The returned
// cleanup stops what was started.
func (s *storeFlags) open(ctx context.Context) (url string, cleanup func(), err error) {
	if s.url != "" {
		return s.url, func() {}, nil
	}
	return startDefault(ctx)
}

// client opens a Client on url.
func client(ctx context.Context, url string, o *fencelock.Options) (*fencelock.Client, error) {
	return fencelock.DefaultURLMux().Open(ctx, url, o)
}

// parse parses args, mapping flag errors to usageError.
func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "fencelock %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return usageError{fmt.Errorf("unexpected argument")}
	}
	return nil
}

// demoTTL is a short TTL the store can honour.
func demoTTL(c *fencelock.Client, want time.Duration) time.Duration {
	caps := c.Capabilities()
	ttl := max(want, caps.MinTTL)
	if g := caps.TTLGranularity; g > 0 && ttl%g != 0 {
		ttl = (ttl/g + 1) * g
	}
	return ttl
}

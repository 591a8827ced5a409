package main

import (
	"context"
	"errors"
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
		if errors.Is(err, flag.ErrHelp) {
			return err // -h: the usage was printed; main exits 0
		}
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

// openClients opens n clients on url sharing a fresh prefix named after
// kind (so runs never collide); closeAll closes them.
func openClients(ctx context.Context, url, kind string, n int) (cs []*fencelock.Client, closeAll func(), err error) {
	cs, _, closeAll, err = openPrefixedClients(ctx, url, kind, n)
	return cs, closeAll, err
}

// openPrefixedClients is openClients that also returns the prefix.
func openPrefixedClients(ctx context.Context, url, kind string, n int) (cs []*fencelock.Client, prefix string, closeAll func(), err error) {
	prefix = fmt.Sprintf("fencelock-%s-%d/", kind, time.Now().UnixNano())
	closeAll = func() {
		for _, c := range cs {
			c.Close()
		}
	}
	for range n {
		c, err := client(ctx, url, &fencelock.Options{Prefix: prefix})
		if err != nil {
			closeAll()
			return nil, "", func() {}, err
		}
		cs = append(cs, c)
	}
	return cs, prefix, closeAll, nil
}

// acquireReleaseLatencies measures n uncontended TryAcquire+Release on c;
// progress, if set, is called with the count done every 500.
func acquireReleaseLatencies(ctx context.Context, c *fencelock.Client, n int, progress func(done int)) ([]time.Duration, error) {
	o := &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)}
	lat := make([]time.Duration, 0, n)
	for i := range n {
		t0 := time.Now()
		l, err := c.TryAcquire(ctx, "uncontended", o)
		if err != nil {
			return lat, err
		}
		if err := l.Release(ctx); err != nil {
			return lat, err
		}
		lat = append(lat, time.Since(t0))
		if progress != nil && i%500 == 499 {
			progress(i + 1)
		}
	}
	return lat, nil
}

// lockers views clients as Lockers.
func lockers(cs []*fencelock.Client) []fencelock.Locker {
	ls := make([]fencelock.Locker, len(cs))
	for i, c := range cs {
		ls[i] = c
	}
	return ls
}

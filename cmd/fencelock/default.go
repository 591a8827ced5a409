package main

import (
	"context"
	"fmt"
	"os"

	"github.com/fencelock/fencelock/internal/testserver"
)

// startDefault starts the embedded default store: a real single-member
// etcd inside this process, with its data in a temp dir removed on cleanup.
func startDefault(ctx context.Context) (string, func(), error) {
	dir, err := os.MkdirTemp("", "fencelock-etcd-")
	if err != nil {
		return "", nil, err
	}
	url, stop, err := testserver.StartEmbeddedEtcd(ctx, dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("starting the embedded etcd (use --url to pick a store): %w", err)
	}
	fmt.Fprintf(os.Stderr, "fencelock: no --url: started an embedded etcd at %s (data in %s, removed on exit)\n", url, dir)
	return url, func() { _ = stop(); os.RemoveAll(dir) }, nil
}

package testserver

import (
	"context"
	"os"
)

// NewRedis starts a single redis-server outside of a test (for the CLI's
// compare command) in a new temp dir. The caller calls Cleanup.
func NewRedis(ctx context.Context) (r *Redis, cleanup func(), err error) {
	bin, err := LookPath("redis-server", "/usr/bin/redis-server")
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "fencelock-redis-")
	if err != nil {
		return nil, nil, err
	}
	r, err = startRedisNode(ctx, bin, dir, false)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return r, func() { _ = r.Proc.Kill(); os.RemoveAll(dir) }, nil
}

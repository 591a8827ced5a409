// Package goredislog routes go-redis's own log lines for the backends that
// use go-redis (redis, redlock). go-redis writes some errors (a pool that
// cannot dial, a connection closed under a command) to stderr through a
// logger global to the process (goredis.SetLogger); fencelock returns
// those errors to the caller already, so by default the lines are dropped.
// One forwarder and one destination serve every backend, so that two
// backends in one process cannot override each other's choice.
package goredislog

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

var (
	once sync.Once
	dest atomic.Pointer[slog.Logger]
)

// To installs the forwarder (once per process) and sends go-redis's log
// lines to l at level Warn from now on, or drops them if l is nil.
func To(l *slog.Logger) {
	dest.Store(l)
	Quiet()
}

// Quiet installs the forwarder once; until To is called it drops every line.
func Quiet() { once.Do(func() { goredis.SetLogger(forwarder{}) }) }

type forwarder struct{}

func (forwarder) Printf(ctx context.Context, format string, v ...any) {
	if l := dest.Load(); l != nil {
		l.WarnContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
	}
}

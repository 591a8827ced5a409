package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// go-redis writes some errors (a pool that cannot dial, a connection
// closed under a command) to stderr through its own logger, which is
// global to the process (goredis.SetLogger). fencelock returns those
// errors to the caller already (a dead primary is part of normal Redlock
// operation), so by default the lines are dropped: the first Client opened
// by URL installs, once, a go-redis logger that sends them to the
// *slog.Logger given to LogGoRedisTo, or nowhere. Clients made with New
// leave go-redis's logger alone (the go-redis clients are the caller's,
// and so is their logging). The redis backend does the same with its own
// LogGoRedisTo; with both in one process, the logger installed last
// receives every line, so give both the same destination.

var (
	goRedisLogOnce sync.Once
	goRedisLogDest atomic.Pointer[slog.Logger]
)

// LogGoRedisTo installs (once per process) a go-redis logger that sends
// go-redis's own log lines to l at level Warn, or drops them if l is nil,
// and sets l as their destination from now on.
func LogGoRedisTo(l *slog.Logger) {
	goRedisLogDest.Store(l)
	quietGoRedis()
}

func quietGoRedis() {
	goRedisLogOnce.Do(func() { goredis.SetLogger(goRedisLogger{}) })
}

type goRedisLogger struct{}

func (goRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := goRedisLogDest.Load(); l != nil {
		l.WarnContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
	}
}

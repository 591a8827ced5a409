package redis

// Logging (internals; the package doc in doc.go has what users need).
//
// go-redis logs some errors (a pool that cannot dial) to stderr through a
// process-wide logger. fencelock returns those errors to the caller as
// well, but leaves that logger to the application, which may use go-redis
// itself: opening a lock never changes it. LogGoRedisTo sends the lines to
// a *slog.Logger, or drops them.

import (
	"log/slog"

	"github.com/fencelock/fencelock/internal/goredislog"
)

// go-redis writes some errors (a pool that cannot dial, a connection
// closed under a command) to stderr through its own logger, which is
// global to the process (goredis.SetLogger). fencelock returns those
// errors to the caller already, but it leaves that logger alone: it
// belongs to the application, which may use go-redis itself. An
// application that wants the lines elsewhere, or dropped, calls
// LogGoRedisTo (the fencelock CLI drops them).

// LogGoRedisTo installs a go-redis logger for the whole process that
// sends go-redis's own log lines to l at level Warn, or drops them if l is
// nil. The destination is shared with every fencelock backend built on
// go-redis. It replaces a logger given to goredis.SetLogger earlier; call
// goredis.SetLogger afterwards to take go-redis's logging back.
func LogGoRedisTo(l *slog.Logger) { goredislog.To(l) }

package redlock

import (
	"log/slog"

	"github.com/fencelock/fencelock/internal/goredislog"
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
// LogGoRedisTo; both share one destination (internal/goredislog).

// LogGoRedisTo sends go-redis's own log lines to l at level Warn, or drops
// them if l is nil (the default once a Client was opened by URL). The
// destination is shared with every fencelock backend built on go-redis. It
// replaces a logger given to goredis.SetLogger earlier; call
// goredis.SetLogger afterwards to take go-redis's logging back.
func LogGoRedisTo(l *slog.Logger) { goredislog.To(l) }

// quietGoRedis drops go-redis's log lines unless LogGoRedisTo chose a
// destination.
func quietGoRedis() { goredislog.Quiet() }

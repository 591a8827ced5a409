package redisx

import (
	"errors"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// IsReply reports whether err is an error reply from the server.
func IsReply(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// UnavailableReply reports whether a server error reply means "cannot
// serve now" rather than "bad request": retrying later may succeed.
func UnavailableReply(err error) bool {
	return hasPrefix(err, "LOADING", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "TRYAGAIN", "BUSY", "NOREPLICAS", "OOM", "MAXCLIENTS", "ERR max number of clients")
}

// ConfigReply reports whether err is the server refusing a connection's
// set-up (AUTH, HELLO, SELECT), which go-redis sends before a connection's
// first command: a wrong or missing password, an unknown user, a database
// number the server does not have. The command itself never ran.
func ConfigReply(err error) bool {
	return IsReply(err) && hasPrefix(err, "NOAUTH ", "WRONGPASS ", "ERR DB index", "ERR invalid DB index", "ERR AUTH ", "ERR Client sent AUTH")
}

// ClusterRedirect reports whether err is a MOVED or ASK reply: a client
// for a single server is talking to a Redis Cluster node.
func ClusterRedirect(err error) bool {
	return IsReply(err) && hasPrefix(err, "MOVED ", "ASK ")
}

// NotSent reports whether err shows the request never reached the server
// (no connection could be made, or the server refused the connection's
// set-up), so it cannot have been applied.
func NotSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return ConfigReply(err) || errors.Is(err, goredis.ErrClosed) || errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrPoolExhausted)
}

func hasPrefix(err error, prefixes ...string) bool {
	msg := err.Error()
	for _, p := range prefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

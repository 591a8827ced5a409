package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Redis is one redis-server: a child process started by StartRedis or
// StartRedisProcess, or an existing server named by REDIS_URL (then Proc is
// nil and there are no fault controls).
type Redis struct {
	// Proc is the child process (Kill, Pause, Resume, Restart, ...), or nil
	// for an existing server.
	Proc *Proc
	// Port is the client port (0 for an existing server).
	Port int
	// BusPort is the cluster bus port of a cluster node, else 0.
	BusPort int
	// Dir is the working directory (nodes.conf of a cluster node).
	Dir string

	url string
}

// URL returns a redis:// URL for the server: redis://127.0.0.1:PORT/0, or
// REDIS_URL for an existing server.
func (r *Redis) URL() string { return r.url }

// Addr returns 127.0.0.1:PORT (empty for an existing server).
func (r *Redis) Addr() string {
	if r.Port == 0 {
		return ""
	}
	return Addr(r.Port)
}

// Do sends one command to the server over a fresh connection and returns
// the reply (see Do on RESP replies). It is for test set-up and checks.
func (r *Redis) Do(ctx context.Context, args ...string) (any, error) {
	return redisDo(ctx, r.Addr(), args...)
}

// RedisURLEnv names the environment variable that points StartRedis at an
// existing server instead of starting one (e.g. redis://127.0.0.1:6379/0).
const RedisURLEnv = "REDIS_URL"

// StartRedis returns a running redis-server for tb: the server named by
// REDIS_URL if set, else a new child process on a free 127.0.0.1 port with
// persistence off, stopped when tb ends. A missing redis-server binary skips
// tb (fails it under CI=true).
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	if u := os.Getenv(RedisURLEnv); u != "" {
		return &Redis{url: u}
	}
	return StartRedisProcess(tb)
}

// StartRedisProcess is StartRedis without the REDIS_URL escape: it always
// starts a child process, for fault tests that kill, pause or restart it.
func StartRedisProcess(tb testing.TB, extraArgs ...string) *Redis {
	tb.Helper()
	bin, err := LookPath("redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
	if err != nil {
		Unavailable(tb, "redis-server", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := startRedisNode(ctx, bin, tb.TempDir(), false, extraArgs...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = r.Proc.Kill() })
	return r
}

// startRedisNode starts redis-server in dir on free ports (retrying if a
// port was taken meanwhile). cluster adds the cluster-mode arguments with
// an explicit bus port.
func startRedisNode(ctx context.Context, bin, dir string, cluster bool, extraArgs ...string) (*Redis, error) {
	var lastErr error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		busPort := 0
		args := []string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--daemonize", "no", "--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", "", "--protected-mode", "no",
		}
		if cluster {
			if busPort, err = FreePort(); err != nil {
				return nil, err
			}
			args = append(args, "--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(busPort))
		}
		args = append(args, extraArgs...)
		addr := Addr(port)
		p := &Proc{
			Name: "redis-server " + addr,
			Path: bin,
			Args: args,
			Dir:  dir,
			Ready: func(ctx context.Context) error {
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				v, err := redisDo(rctx, addr, "PING")
				if err == nil && v != "PONG" {
					err = fmt.Errorf("PING answered %v", v)
				}
				return err
			},
		}
		if lastErr = p.Start(ctx); lastErr == nil {
			return &Redis{Proc: p, Port: port, BusPort: busPort, Dir: dir, url: "redis://" + addr + "/0"}, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// RedisReplyError is an error reply (-ERR ...) from the server.
type RedisReplyError string

func (e RedisReplyError) Error() string { return string(e) }

// IsRedisReply reports whether err is an error reply from the server (as
// opposed to a network error).
func IsRedisReply(err error) bool {
	var re RedisReplyError
	return errors.As(err, &re)
}

// InfoField returns field from an INFO reply ("" if absent).
func InfoField(info any, field string) string {
	s, _ := info.(string)
	for line := range strings.SplitSeq(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

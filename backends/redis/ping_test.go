package redis

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/internal/redisx"
)

// TestRepingForgetsOldPing: a waiter pinged again after a connection
// break (mark) must not have its new pong closed by the reply to its old
// PING, nor closed twice when both replies come (the torture run found
// "close of closed channel" after a proxy reset).
func TestRepingForgetsOldPing(t *testing.T) {
	// The PINGs go to a connection nobody answers: the test plays the replies.
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	defer client.Close()
	sub := redisx.NewSub(client, redisx.Handlers{Message: func(string, string) {}, Pong: func(string) {}, Broken: func() {}})
	defer sub.Close()
	h := &hub{sub: sub, pings: map[string]*waiter{}, chans: map[string]map[*waiter]struct{}{}, confirmed: map[string]uint64{}}
	w := &waiter{channel: "c"}
	h.pingLocked(w)
	old := w.ping
	h.epoch++ // the connection broke
	h.pingLocked(w)
	h.pong(old)
	select {
	case <-w.pong:
		t.Fatalf("the reply to the PING sent before the break confirmed the new one")
	default:
	}
	h.pong(w.ping) // must not panic
	select {
	case <-w.pong:
	default:
		t.Fatalf("the reply to the new PING did not close its pong")
	}
}

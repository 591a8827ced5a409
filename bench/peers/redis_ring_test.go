package peers

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/internal/testserver"
)

// BenchmarkRedisRing is a floor for a fair, server-mediated hand-off on
// this machine: 8 clients (each its own go-redis client and subscription,
// as in the contention measure) pass one token around a ring through the
// server. The holder hands the token to the next client's channel, then
// makes one round trip of its own (standing for asking for the lock
// again) and waits for its next turn. No lock semantics, no fence, no
// queue logic: what is left is the message each grant needs and the
// re-ask each closed-loop worker makes. It reports grants/s and the CPU
// time per grant of this process and of the server; compare with the
// contended columns of `make bench-peers` (same 8 clients).
//
// Four modes:
//
//   - plain: the hand-off is a PUBLISH, the re-ask a SET; each client's
//     messages reach its worker through go-redis's PubSub.Channel (a
//     goroutine reads the connection and passes them on, as the redis
//     backend's hub does).
//   - scripts: as plain, but both are EVALSHA of trivial scripts (the
//     hand-off's PUBLISHes) with the keys and arguments the redis backend
//     sends for a release and a blocked acquire: what the scripts'
//     transport costs without their logic.
//   - reserve: as scripts, without the re-ask: what a fair hand-off would
//     cost if the release script also queued the releaser for its next
//     turn (one script and one round trip per grant instead of two).
//   - direct: as plain, but each worker reads its own subscription
//     (PubSub.ReceiveTimeout), as the redis backend's lane does: what one
//     goroutine wake-up fewer per grant is worth.
//
// Run it with:
//
//	cd bench && go test -run XXX -bench RedisRing -benchtime 3x ./peers/
func BenchmarkRedisRing(b *testing.B) {
	for _, mode := range []string{"plain", "scripts", "direct", "reserve"} {
		b.Run(mode, func(b *testing.B) { ring(b, mode) })
	}
}

// The scripts mode's stand-ins for release.lua and acquire.lua.
var (
	ringRelease = goredis.NewScript(`redis.call('PUBLISH', ARGV[2], ARGV[3]) return 1`)
	ringAcquire = goredis.NewScript(`return {0, 1}`)
)

func ring(b *testing.B, mode string) {
	ctx := context.Background()
	r, stop, err := testserver.NewRedis(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	const n = 8
	clients := make([]*goredis.Client, n)
	subs := make([]*goredis.PubSub, n)
	for i := range n {
		clients[i] = goredis.NewClient(&goredis.Options{Addr: r.Addr()})
		defer clients[i].Close()
		subs[i] = clients[i].Subscribe(ctx, "ring:"+strconv.Itoa(i))
		defer subs[i].Close()
		if _, err := subs[i].Receive(ctx); err != nil { // subscribed
			b.Fatal(err)
		}
	}
	// pass hands the token on and re-asks, as the mode says.
	pass := func(c *goredis.Client, i int, next, token string) error {
		if mode == "scripts" || mode == "reserve" {
			keys := []string{"ring", "{ring}:fence", "{ring}:waiters:fencelock"}
			const tok, cid = "cfe772b5f4f79d4e8364f3dd592453eb", "362c558c65935c92c627c915f99c5d98"
			if err := ringRelease.Run(ctx, c, keys, tok, next, token).Err(); err != nil {
				return err
			}
			if mode == "reserve" {
				return nil // the release script re-queued its caller: no re-ask
			}
			return ringAcquire.Run(ctx, c, keys, tok, 30000, 3000, "{ring}", cid).Err()
		}
		if err := c.Publish(ctx, next, token).Err(); err != nil {
			return err
		}
		return c.Set(ctx, "ring:ask:"+strconv.Itoa(i), "t", 0).Err()
	}
	var grants atomic.Int64
	var total int64
	var elapsed, client, server time.Duration
	round := 0
	for b.Loop() {
		round++
		token := strconv.Itoa(round) // a token left over from an earlier round is dropped
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		grants.Store(0)
		for i := range n {
			wg.Go(func() {
				c, next := clients[i], "ring:"+strconv.Itoa((i+1)%n)
				var ch <-chan *goredis.Message
				if mode != "direct" {
					ch = subs[i].Channel()
				}
				for {
					if mode == "direct" {
						if rctx.Err() != nil {
							return
						}
						msg, err := subs[i].ReceiveTimeout(rctx, 100*time.Millisecond)
						if err != nil {
							continue
						}
						if m, ok := msg.(*goredis.Message); !ok || m.Payload != token {
							continue
						}
					} else {
						select {
						case <-rctx.Done():
							return
						case m := <-ch:
							if m.Payload != token {
								continue
							}
						}
					}
					grants.Add(1)
					if err := pass(c, i, next, token); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		s0, ok0 := serverCPU([]int{r.Proc.PID()})
		c0, t0 := processCPU(), time.Now()
		if err := clients[0].Publish(ctx, "ring:0", token).Err(); err != nil {
			b.Fatal(err)
		}
		<-rctx.Done()
		g := grants.Load()
		elapsed += time.Since(t0)
		client += processCPU() - c0
		if s1, ok1 := serverCPU([]int{r.Proc.PID()}); ok0 && ok1 {
			server += s1 - s0
		}
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		total += g
	}
	g := float64(total)
	b.ReportMetric(g/elapsed.Seconds(), "grants/s")
	b.ReportMetric(float64(client.Microseconds())/g, "client-cpu-µs/grant")
	b.ReportMetric(float64(server.Microseconds())/g, "server-cpu-µs/grant")
	b.ReportMetric(0, "ns/op")
}

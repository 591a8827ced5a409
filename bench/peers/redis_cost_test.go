package peers

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// serverCPU is the Redis server's CPU time (user + system), from INFO cpu:
// its command execution and its network I/O.
func serverCPU(ctx context.Context, b *testing.B, rc *goredis.Client) time.Duration {
	info, err := rc.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(testserver.InfoField(info, f), 64)
		if err != nil {
			b.Fatalf("%s in INFO cpu: %v", f, err)
		}
		total += v
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkRedisCycle splits an uncontended acquire+release into the
// server's share (its CPU time per cycle, from INFO cpu: commands and
// network I/O) and the rest (round trips and client work), for fencelock's fenced
// cycle, redislock's and a plain SET NX + compare-and-delete, on one server
// and one default go-redis client:
//
//	cd bench && go test -run XXX -bench RedisCycle -count 3 ./peers/
//
// The fence's cost on the server is the acquire script's reads and writes
// (lock, fence and void keys, TIME) and the release notice.
func BenchmarkRedisCycle(b *testing.B) {
	ctx := context.Background()
	r, stop, err := testserver.NewRedis(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	rc := goredis.NewClient(&goredis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(r.URL(), "redis://"), "/0")})
	defer rc.Close()
	fc, err := fencelock.Open(ctx, r.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer fc.Close()
	rl := redislock.New(rc)
	release := goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	opt := &fencelock.AcquireOptions{TTL: 30 * time.Second, AutoRenew: fencelock.Bool(false)}
	for _, c := range []struct {
		name  string
		cycle func() error
	}{
		{"fencelock", func() error {
			l, err := fc.TryAcquire(ctx, "cycle-fencelock", opt)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{"redislock", func() error {
			l, err := rl.Obtain(ctx, "cycle-redislock", 30*time.Second, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{"plain", func() error {
			if err := rc.SetNX(ctx, "cycle-plain", "token", 30*time.Second).Err(); err != nil {
				return err
			}
			return release.Run(ctx, rc, []string{"cycle-plain"}, "token").Err()
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if err := c.cycle(); err != nil { // loads the scripts
				b.Fatal(err)
			}
			cpu0 := serverCPU(ctx, b, rc)
			b.ReportAllocs()
			for b.Loop() {
				if err := c.cycle(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((serverCPU(ctx, b, rc)-cpu0).Microseconds())/float64(b.N), "server-cpu-µs/op")
		})
	}
}

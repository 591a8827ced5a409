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

// redisServerCPU is the Redis server's CPU time (user + system), from INFO cpu:
// its command execution and its network I/O.
func redisServerCPU(ctx context.Context, b *testing.B, rc *goredis.Client) time.Duration {
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
// network I/O), the client's (this process's CPU time per cycle) and the
// wall time, for fencelock's fenced cycle, redislock's and a plain SET NX +
// compare-and-delete, on one server and one default go-redis client. The
// three run interleaved, in blocks of 50 cycles, so that drift in machine
// load hits all alike; the ratios are fencelock over redislock.
//
//	cd bench && go test -run XXX -bench RedisCycle -benchtime 100x -count 3 ./peers/
//
// The fence's cost on the server is the acquire script's reads and writes
// (lock, fence and void keys, the queue check, TIME).
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
	type impl struct {
		name              string
		cycle             func() error
		wall, client, srv time.Duration
	}
	impls := []*impl{
		{name: "fencelock", cycle: func() error {
			l, err := fc.TryAcquire(ctx, "cycle-fencelock", opt)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{name: "redislock", cycle: func() error {
			l, err := rl.Obtain(ctx, "cycle-redislock", 30*time.Second, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{name: "plain", cycle: func() error {
			if err := rc.SetNX(ctx, "cycle-plain", "token", 30*time.Second).Err(); err != nil {
				return err
			}
			return release.Run(ctx, rc, []string{"cycle-plain"}, "token").Err()
		}},
	}
	for _, im := range impls {
		if err := im.cycle(); err != nil { // loads the scripts
			b.Fatal(err)
		}
	}
	const block = 50
	for b.Loop() {
		for _, im := range impls {
			s0, c0, t0 := redisServerCPU(ctx, b, rc), processCPU(), time.Now()
			for range block {
				if err := im.cycle(); err != nil {
					b.Fatal(err)
				}
			}
			im.wall += time.Since(t0)
			im.client += processCPU() - c0
			im.srv += redisServerCPU(ctx, b, rc) - s0
		}
	}
	n := float64(b.N * block)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / n / 1e3 }
	for _, im := range impls {
		b.ReportMetric(us(im.wall), im.name+"-µs/op")
		b.ReportMetric(us(im.client), im.name+"-client-cpu-µs/op")
		b.ReportMetric(us(im.srv), im.name+"-server-cpu-µs/op")
	}
	b.ReportMetric(float64(impls[0].wall)/float64(impls[1].wall), "wall-ratio")
	b.ReportMetric(float64(impls[0].client+impls[0].srv)/float64(impls[1].client+impls[1].srv), "cpu-ratio")
	b.ReportMetric(0, "ns/op")
}

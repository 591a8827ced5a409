package zookeeper_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/internal/testhelp"
)

// These benchmarks compare this backend with go-zookeeper's own zk.Lock
// (the standard recipe, no fence) on the same standalone server (fsync
// on), in the same run:
//
//	go test -run '^$' -bench . -benchtime 2s ./backends/zookeeper/
//
// Exists is one read: the "PING" the others are divided by.

const benchTTL = 15 * time.Second

func benchName(b *testing.B) string { return fmt.Sprintf("%s-%d", b.Name(), time.Now().UnixNano()) }

func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("Exists", func(b *testing.B) {
		raw := rawConn(b, sharedURL(b))
		for b.Loop() {
			if _, _, err := raw.Exists("/"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fencelock", func(b *testing.B) {
		c := open(b, sharedURL(b), nil)
		n := benchName(b)
		o := &fencelock.AcquireOptions{TTL: benchTTL, AutoRenew: fencelock.Bool(false)}
		for b.Loop() {
			l, err := c.Acquire(b.Context(), n, o)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("zk.Lock", func(b *testing.B) {
		raw := rawConn(b, sharedURL(b))
		zl := zk.NewLock(raw, lockPath(benchName(b)), zk.WorldACL(zk.PermAll))
		for b.Loop() {
			if err := zl.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := zl.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandOff: time from the holder's release call to the blocked
// waiter's return; median and p99.
func BenchmarkHandOff(b *testing.B) {
	b.Run("fencelock", func(b *testing.B) {
		u := sharedURL(b)
		a, w := open(b, u, nil), open(b, u, nil)
		n := benchName(b)
		var all []time.Duration
		for b.Loop() {
			lat, err := conformance.HandOffLatencies(b.Context(), a, w, n, 1)
			if err != nil {
				b.Fatal(err)
			}
			all = append(all, lat...)
		}
		testhelp.ReportHandoffs(b, all)
	})
	b.Run("zk.Lock", func(b *testing.B) {
		u := sharedURL(b)
		p := lockPath(benchName(b))
		la := zk.NewLock(rawConn(b, u), p, zk.WorldACL(zk.PermAll))
		lw := zk.NewLock(rawConn(b, u), p, zk.WorldACL(zk.PermAll))
		var all []time.Duration
		for b.Loop() {
			if err := la.Lock(); err != nil {
				b.Fatal(err)
			}
			got := make(chan time.Time, 1)
			go func() {
				if err := lw.Lock(); err != nil {
					b.Error(err)
				}
				got <- time.Now()
			}()
			time.Sleep(2 * time.Millisecond) // let the waiter block, as HandOffLatencies does
			released := time.Now()
			if err := la.Unlock(); err != nil {
				b.Fatal(err)
			}
			all = append(all, (<-got).Sub(released))
			if err := lw.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
		testhelp.ReportHandoffs(b, all)
	})
}

// BenchmarkContended8: 8 workers, each with its own client (session),
// take and release one lock for 1 s per iteration; sections per second
// and the worst wait.
func BenchmarkContended8(b *testing.B) {
	const workers = 8
	b.Run("fencelock", func(b *testing.B) {
		u := sharedURL(b)
		lockers := make([]fencelock.Locker, workers)
		for i := range lockers {
			lockers[i] = open(b, u, nil)
		}
		n := benchName(b)
		var sections int
		var elapsed, worst time.Duration
		for b.Loop() {
			r, err := conformance.Contended(b.Context(), lockers, n, workers, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			sections += r.Sections
			elapsed += r.Elapsed
			worst = max(worst, r.WaitMax)
		}
		b.ReportMetric(float64(sections)/elapsed.Seconds(), "sections/s")
		b.ReportMetric(float64(worst.Milliseconds()), "max-wait-ms")
	})
	b.Run("zk.Lock", func(b *testing.B) {
		u := sharedURL(b)
		p := lockPath(benchName(b))
		locks := make([]*zk.Lock, workers)
		for i := range locks {
			locks[i] = zk.NewLock(rawConn(b, u), p, zk.WorldACL(zk.PermAll))
		}
		var sections int
		var elapsed, worst time.Duration
		for b.Loop() {
			n, el, w := zkContended(locks, time.Second)
			sections += n
			elapsed += el
			worst = max(worst, w)
		}
		b.ReportMetric(float64(sections)/elapsed.Seconds(), "sections/s")
		b.ReportMetric(float64(worst.Milliseconds()), "max-wait-ms")
	})
}

func zkContended(locks []*zk.Lock, d time.Duration) (int, time.Duration, time.Duration) {
	var mu sync.Mutex
	var n int
	var worst time.Duration
	start := time.Now()
	stop := start.Add(d)
	var wg sync.WaitGroup
	for _, l := range locks {
		wg.Go(func() {
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := l.Lock(); err != nil {
					return
				}
				w := time.Since(t0)
				_ = l.Unlock()
				mu.Lock()
				n++
				worst = max(worst, w)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return n, time.Since(start), worst
}

// BenchmarkHold10000: 10,000 leases held on one Client (one session) with
// auto-renew on for three TTLs.
func BenchmarkHold10000(b *testing.B) {
	c := open(b, sharedURL(b), nil)
	for b.Loop() {
		r, err := conformance.HoldMany(context.Background(), c, benchName(b), 10000, 5*time.Second, 15*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%v", r)
		b.ReportMetric(float64(r.Goroutines), "goroutines")
		b.ReportMetric(float64(r.HeapPerLease), "B/lease")
		b.ReportMetric(float64(r.Lost), "lost")
		b.ReportMetric(r.AcquireElapsed.Seconds(), "acquire-s")
	}
}

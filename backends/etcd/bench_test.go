package etcd

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/conformance"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testhelp"
)

// These benchmarks compare this backend with etcd's own
// concurrency.Mutex on the same single-member server, in the same run:
//
//	go test -run '^$' -bench . -benchtime 2s ./backends/etcd/
//
// Get is a linearizable read: the "PING" the others are divided by.

const benchTTL = 15 * time.Second

func benchClients(b *testing.B, n int) (*testserverURL, []*clientv3.Client) {
	c := sharedEtcd(b, 1)
	clis := make([]*clientv3.Client, n)
	for i := range clis {
		clis[i] = newClientv3(b, c.Endpoints()...)
	}
	return &testserverURL{c.URL("fencelock-bench")}, clis
}

type testserverURL struct{ url string }

func (u *testserverURL) open(b *testing.B) *fencelock.Client {
	c, err := fencelock.Open(b.Context(), u.url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func uniqueName(b *testing.B) string { return fmt.Sprintf("%s-%d", b.Name(), time.Now().UnixNano()) }

func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("Get", func(b *testing.B) {
		_, clis := benchClients(b, 1)
		for b.Loop() {
			if _, err := clis[0].Get(b.Context(), "fencelock-bench-ping"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fencelock", func(b *testing.B) {
		u, _ := benchClients(b, 0)
		c := u.open(b)
		name := uniqueName(b)
		o := &fencelock.AcquireOptions{TTL: benchTTL, AutoRenew: fencelock.Bool(false)}
		for b.Loop() {
			l, err := c.Acquire(b.Context(), name, o)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
	})
	// TryAcquire, as bench-peers measures it (next to Mutex-sharedSession-try).
	b.Run("fencelock-try", func(b *testing.B) {
		u, _ := benchClients(b, 0)
		c := u.open(b)
		name := uniqueName(b)
		o := &fencelock.AcquireOptions{TTL: benchTTL, AutoRenew: fencelock.Bool(false)}
		timePairs(b, func(ctx context.Context) error {
			l, err := c.TryAcquire(ctx, name, o)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	// The backend's own TryAcquireAt+Release, without the portable layer
	// (Lease, timers, metrics, token): what fencelock-try costs above it
	// is the portable layer's.
	b.Run("driver-try", func(b *testing.B) {
		u, _ := benchClients(b, 0)
		c := u.open(b)
		be := backendOf(b, c)
		req := driver.AcquireRequest{Name: uniqueName(b), Token: "t", TTL: benchTTL}
		timePairs(b, func(ctx context.Context) error {
			l, _, err := be.TryAcquireAt(ctx, req)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	// etcd's recipe as documented: a Session (lease + keepalive) per lock.
	b.Run("Mutex+Session", func(b *testing.B) {
		_, clis := benchClients(b, 1)
		pfx := "fencelock-bench/" + uniqueName(b)
		for b.Loop() {
			s, err := concurrency.NewSession(clis[0], concurrency.WithTTL(int(benchTTL/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			m := concurrency.NewMutex(s, pfx)
			if err := m.Lock(b.Context()); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(b.Context()); err != nil {
				b.Fatal(err)
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Mutex-sharedSession-try", func(b *testing.B) {
		_, clis := benchClients(b, 1)
		s, err := concurrency.NewSession(clis[0], concurrency.WithTTL(int(benchTTL/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		pfx := "fencelock-bench/" + uniqueName(b)
		timePairs(b, func(ctx context.Context) error {
			m := concurrency.NewMutex(s, pfx)
			if err := m.TryLock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		})
	})
	// The Mutex on one long-lived Session (no per-lock lease: cheaper, but
	// every lock of the session shares its fate).
	b.Run("Mutex-sharedSession", func(b *testing.B) {
		_, clis := benchClients(b, 1)
		s, err := concurrency.NewSession(clis[0], concurrency.WithTTL(int(benchTTL/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		m := concurrency.NewMutex(s, "fencelock-bench/"+uniqueName(b))
		for b.Loop() {
			if err := m.Lock(b.Context()); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandOff: time from the holder's release call to the blocked
// waiter's return; median and p99.
func BenchmarkHandOff(b *testing.B) {
	b.Run("fencelock", func(b *testing.B) {
		u, _ := benchClients(b, 0)
		a, w := u.open(b), u.open(b)
		name := uniqueName(b)
		var all []time.Duration
		for b.Loop() {
			lat, err := conformance.HandOffLatencies(b.Context(), a, w, name, 1)
			if err != nil {
				b.Fatal(err)
			}
			all = append(all, lat...)
		}
		testhelp.ReportHandoffs(b, all)
	})
	b.Run("Mutex", func(b *testing.B) {
		_, clis := benchClients(b, 2)
		pfx := "fencelock-bench/" + uniqueName(b)
		sa, sw := session(b, clis[0]), session(b, clis[1])
		var all []time.Duration
		for b.Loop() {
			ma, mw := concurrency.NewMutex(sa, pfx), concurrency.NewMutex(sw, pfx)
			if err := ma.Lock(b.Context()); err != nil {
				b.Fatal(err)
			}
			got := make(chan time.Time, 1)
			go func() {
				if err := mw.Lock(b.Context()); err != nil {
					b.Error(err)
				}
				got <- time.Now()
			}()
			time.Sleep(2 * time.Millisecond) // let the waiter block, as HandOffLatencies does
			released := time.Now()
			if err := ma.Unlock(b.Context()); err != nil {
				b.Fatal(err)
			}
			all = append(all, (<-got).Sub(released))
			if err := mw.Unlock(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
		testhelp.ReportHandoffs(b, all)
	})
}

func session(b *testing.B, cli *clientv3.Client) *concurrency.Session {
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(benchTTL/time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// timePairs times cycle (one acquire+release) per b.Loop iteration and
// reports the median and p99, as bench-peers does.
func timePairs(b *testing.B, cycle func(context.Context) error) {
	var all []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := cycle(b.Context()); err != nil {
			b.Fatal(err)
		}
		all = append(all, time.Since(t0))
	}
	b.ReportMetric(float64(conformance.Percentile(all, 0.5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(conformance.Percentile(all, 0.99).Microseconds()), "p99-µs")
}

// BenchmarkContended8: 8 workers, each with its own etcd client, take and
// release one lock for 1 s per iteration; sections per second and the
// worst wait.
func BenchmarkContended8(b *testing.B) {
	const workers = 8
	b.Run("fencelock", func(b *testing.B) {
		u, _ := benchClients(b, 0)
		lockers := make([]fencelock.Locker, workers)
		for i := range lockers {
			lockers[i] = u.open(b)
		}
		name := uniqueName(b)
		var sections int
		var elapsed, worst time.Duration
		for b.Loop() {
			r, err := conformance.Contended(b.Context(), lockers, name, workers, time.Second)
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
	b.Run("Mutex", func(b *testing.B) {
		_, clis := benchClients(b, workers)
		pfx := "fencelock-bench/" + uniqueName(b)
		sessions := make([]*concurrency.Session, workers)
		for i := range sessions {
			sessions[i] = session(b, clis[i])
		}
		var sections int
		var elapsed, worst time.Duration
		for b.Loop() {
			n, el, w := mutexContended(b.Context(), sessions, pfx, time.Second)
			sections += n
			elapsed += el
			worst = max(worst, w)
		}
		b.ReportMetric(float64(sections)/elapsed.Seconds(), "sections/s")
		b.ReportMetric(float64(worst.Milliseconds()), "max-wait-ms")
	})
}

func mutexContended(ctx context.Context, sessions []*concurrency.Session, pfx string, d time.Duration) (int, time.Duration, time.Duration) {
	var mu sync.Mutex
	var n int
	var worst time.Duration
	start := time.Now()
	stop := start.Add(d)
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Go(func() {
			for time.Now().Before(stop) {
				m := concurrency.NewMutex(s, pfx)
				t0 := time.Now()
				if err := m.Lock(ctx); err != nil {
					return
				}
				w := time.Since(t0)
				_ = m.Unlock(ctx)
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

// BenchmarkExtend: the latency of one Extend of a held lease (its class's
// keepalive and the read of its key that goes with it), next to a
// linearizable Get. Renewals of a class are paced (refreshGap): each
// Extend here starts refreshGap after the last, outside the timing, so
// that p50/p99 are the renewal's own round trips, not the pacing.
func BenchmarkExtend(b *testing.B) {
	const ttl = 2 * time.Second
	gap := refreshGap(int64(ttl / time.Second))
	b.Run("Get", func(b *testing.B) {
		_, clis := benchClients(b, 1)
		pacedPairs(b, gap, func(ctx context.Context) error {
			_, err := clis[0].Get(ctx, "fencelock-bench-ping")
			return err
		})
	})
	b.Run("fencelock", func(b *testing.B) {
		u, _ := benchClients(b, 0)
		c := u.open(b)
		l, err := c.TryAcquire(b.Context(), uniqueName(b), &fencelock.AcquireOptions{TTL: ttl, AutoRenew: fencelock.Bool(false)})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Release(context.Background())
		pacedPairs(b, gap, func(ctx context.Context) error { return l.Extend(ctx, 0) })
	})
}

// pacedPairs is timePairs with a pause of gap before each call, not
// timed in the percentiles.
func pacedPairs(b *testing.B, gap time.Duration, call func(context.Context) error) {
	var all []time.Duration
	for b.Loop() {
		time.Sleep(gap) // pacing, not a sync: see BenchmarkExtend
		t0 := time.Now()
		if err := call(b.Context()); err != nil {
			b.Fatal(err)
		}
		all = append(all, time.Since(t0))
	}
	b.ReportMetric(float64(conformance.Percentile(all, 0.5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(conformance.Percentile(all, 0.99).Microseconds()), "p99-µs")
}

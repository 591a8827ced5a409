package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redis"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// pubsubConns returns the ids of the pub/sub connections named tag.
func pubsubConns(t *testing.T, rc goredis.UniversalClient, tag string) []int64 {
	t.Helper()
	var ids []int64
	for line := range strings.SplitSeq(rc.ClientList(t.Context()).Val(), "\n") {
		if strings.Contains(line, "name="+tag+" ") && strings.Contains(line, "flags=P") {
			m := regexp.MustCompile(`^id=(\d+) `).FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("CLIENT LIST line without an id: %q", line)
			}
			id, _ := strconv.ParseInt(m[1], 10, 64)
			ids = append(ids, id)
		}
	}
	return ids
}

// TestLaneBrokenConnection: when the lane's connection breaks while its
// waiter is in line, the waiter confirms a new subscription and attempts
// again: a release after the break reaches it at once, not at its next
// refresh (1s here) — the grant may even have been lost with the old
// connection, and the waiter's next attempt answers it.
func TestLaneBrokenConnection(t *testing.T) {
	r := testserver.StartRedis(t)
	tag := fmt.Sprintf("fl-lane-%d", rand.Uint32())
	a := open(t, r.URL(), nil, nil)
	w := open(t, r.URL(), nil, func(o *goredis.UniversalOptions) { o.ClientName = tag })
	rc := native(t, a)
	ctx := t.Context()
	n := name(t)
	for round := range 3 {
		l, err := a.TryAcquire(ctx, n, hold)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *fencelock.Lease, 1)
		go func() {
			l2, err := w.Acquire(ctx, n, hold)
			if err != nil {
				t.Error(err)
			}
			got <- l2
		}()
		queued(t, rc, n, 1)
		ids := pubsubConns(t, rc, tag)
		if len(ids) != 1 {
			t.Fatalf("round %d: %d pub/sub connections for one waiter, want 1 (its lane)", round, len(ids))
		}
		if err := rc.ClientKillByFilter(ctx, "ID", strconv.FormatInt(ids[0], 10)).Err(); err != nil {
			t.Fatal(err)
		}
		if round == 1 {
			// Release only once the waiter is subscribed again: the grant
			// then travels on the new connection.
			deadline := time.Now().Add(5 * time.Second)
			for ids2 := pubsubConns(t, rc, tag); len(ids2) != 1 || ids2[0] == ids[0]; ids2 = pubsubConns(t, rc, tag) {
				if time.Now().After(deadline) {
					t.Fatal("the lane did not reconnect within 5s")
				}
				time.Sleep(time.Millisecond)
			}
		}
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case l2 := <-got:
			if l2 == nil {
				t.FailNow()
			}
			if took := time.Since(released); took > 700*time.Millisecond {
				t.Fatalf("round %d: the waiter got the lock %v after the release: woken by its refresh, not by the grant", round, took)
			}
			if l2.Fence() <= l.Fence() {
				t.Fatalf("fence %d not above %d", l2.Fence(), l.Fence())
			}
			if err := l2.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the waiter did not get the lock within 5s of the release", round)
		}
	}
}

// TestLaneHotLoop: two Clients taking turns on one lock keep their lanes
// subscribed: a hot loop of Acquire and Release subscribes once per Client,
// not once per wait; after linger unused, the lanes close their connections.
func TestLaneHotLoop(t *testing.T) {
	r := testserver.StartRedisProcess(t) // fresh: commandstats count only this test
	tag := fmt.Sprintf("fl-lane-%d", rand.Uint32())
	named := func(o *goredis.UniversalOptions) { o.ClientName = tag }
	a, b := open(t, r.URL(), nil, named), open(t, r.URL(), nil, named)
	rc := native(t, a)
	ctx := t.Context()
	n := name(t)
	const turns = 50
	done := make(chan error, 2)
	for _, c := range []*fencelock.Client{a, b} {
		go func() {
			for range turns {
				l, err := c.Acquire(ctx, n, hold)
				if err != nil {
					done <- err
					return
				}
				if err := l.Release(ctx); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	calls := func(cmd string) int64 {
		info := rc.Info(ctx, "commandstats").Val()
		m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		return v
	}
	if s := calls("subscribe"); s < 1 || s > 2 {
		t.Fatalf("%d SUBSCRIBE calls for %d waits by 2 Clients, want 1 or 2 (one per Client's lane)", s, 2*turns)
	}
	if len(pubsubConns(t, rc, tag)) == 0 {
		t.Fatal("no lane connection right after the loop")
	}
	testhelp.Eventually(t, 10*time.Second, func() error {
		if conns := pubsubConns(t, rc, tag); len(conns) != 0 { // linger (1s) unused, then closed
			return fmt.Errorf("lane connections still open after their last wait: %v", conns)
		}
		return nil
	})
	// A lane that closed its connection serves the next wait.
	l, err := a.TryAcquire(ctx, n, hold)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l2, err := b.Acquire(wctx, n, hold)
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	queued(t, rc, n, 1)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestLaneAndHubHandOff: a Client waiting on two locks at once waits for
// one on its lane and for the other through its hub; a release hands each
// over at once (not at the waiter's next refresh, 1s here).
func TestLaneAndHubHandOff(t *testing.T) {
	r := testserver.StartRedis(t)
	tag := fmt.Sprintf("fl-lane-%d", rand.Uint32())
	a := open(t, r.URL(), nil, nil)
	w := open(t, r.URL(), nil, func(o *goredis.UniversalOptions) { o.ClientName = tag })
	rc := native(t, a)
	ctx := t.Context()
	for round := range 5 {
		names := []string{name(t), name(t)}
		var held []*fencelock.Lease
		for _, n := range names {
			l, err := a.TryAcquire(ctx, n, hold)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		got := make(chan error, len(names))
		for i, n := range names {
			go func() {
				l, err := w.Acquire(ctx, n, hold)
				if err == nil {
					if l.Fence() <= held[i].Fence() {
						err = fmt.Errorf("fence %d not above %d", l.Fence(), held[i].Fence())
					}
					if err2 := l.Release(ctx); err == nil {
						err = err2
					}
				}
				got <- err
			}()
		}
		for _, n := range names {
			queued(t, rc, n, 1)
		}
		if ids := pubsubConns(t, rc, tag); len(ids) != 2 {
			t.Fatalf("round %d: %d pub/sub connections for waits on 2 locks, want 2 (lane and hub)", round, len(ids))
		}
		released := time.Now()
		for _, l := range held {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for range names {
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: a waiter did not get its lock within 5s of the release", round)
			}
		}
		if took := time.Since(released); took > 700*time.Millisecond {
			t.Fatalf("round %d: both waiters held %v after the releases: one was woken by its refresh, not by its grant", round, took)
		}
	}
}

// TestLaneFallsBackToHub: a lane that cannot connect hands its waiter to
// the hub, which gets the grant at once.
func TestLaneFallsBackToHub(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx := t.Context()
	newDriver := func() driver.Backend {
		rc := goredis.NewClient(&goredis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
		d := redis.NewDriver(rc)
		t.Cleanup(func() { _ = d.Close(); _ = rc.Close() })
		return d
	}
	a, w := newDriver(), newDriver()
	broken := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer broken.Close()
	redis.SetLaneClient(w, broken)
	n := name(t)
	req := func() driver.AcquireRequest {
		return driver.AcquireRequest{Name: n, Token: fmt.Sprintf("%032x", rand.Uint64()), TTL: 30 * time.Second}
	}
	l, err := a.TryAcquire(ctx, req())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l2, _, err := w.(driver.Blocker).Acquire(ctx, req())
		if err == nil {
			if l2.Fence() <= l.Fence() {
				err = fmt.Errorf("fence %d not above %d", l2.Fence(), l.Fence())
			}
			if err2 := l2.Release(ctx); err == nil {
				err = err2
			}
		}
		got <- err
	}()
	obs := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer obs.Close()
	queued(t, obs, n, 1)
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock within 5s of the release")
	}
	if took := time.Since(released); took > 700*time.Millisecond {
		t.Fatalf("the waiter held %v after the release: woken by its refresh, not by its grant", took)
	}
}

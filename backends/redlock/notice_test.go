package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/redlock"
)

// queueWaiter puts waiter id into the lead primary's queue of lock at
// score, with a deadline ms milliseconds from the lead's clock (negative:
// already passed).
func queueWaiter(t *testing.T, ctx context.Context, lead *goredis.Client, lock, id string, score float64, ms int64) {
	t.Helper()
	now, err := lead.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.ZAdd(ctx, redlock.QueueKey(lock), goredis.Z{Score: score, Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
	dl := strconv.FormatInt(now.UnixMilli()+ms, 10)
	if err := lead.HSet(ctx, redlock.QueueDeadlinesKey(lock), id, dl).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseNoticeNamesNextWaiter: the lead primary's release notice
// names the first live waiter in its queue (dropping those past their
// deadline), on the lock's channel and on that waiter's Client's own
// channel; the channel of a Client with no waiter at the head gets
// nothing. This is what lets every other waiter sleep through a release.
func TestReleaseNoticeNamesNextWaiter(t *testing.T) {
	m := nodes(t, 3, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	n := name(t)
	lead := goredis.NewClient(&goredis.Options{Addr: m.Addrs()[0]})
	defer lead.Close()
	l, err := c.TryAcquire(ctx, n, &fencelock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	gone, next, after := strings.Repeat("a", 32), strings.Repeat("b", 32), strings.Repeat("c", 32)
	queueWaiter(t, ctx, lead, n, gone+".1", 1, -1000) // its place ended
	queueWaiter(t, ctx, lead, n, next+".7", 2, 10_000)
	queueWaiter(t, ctx, lead, n, after+".3", 3, 10_000)

	sub := lead.Subscribe(ctx, redlock.ReleaseChannel(n), redlock.OwnChannel(n, gone), redlock.OwnChannel(n, next), redlock.OwnChannel(n, after))
	defer sub.Close()
	for range 4 {
		if _, err := sub.Receive(ctx); err != nil { // the subscription confirmations
			t.Fatal(err)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redlock.Idle(c)
	// A PING after the release: its reply comes after every notice the
	// release published on this connection.
	if err := sub.Ping(ctx, "end"); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for {
		msg, err := sub.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := msg.(*goredis.Pong); ok {
			break
		}
		if mm, ok := msg.(*goredis.Message); ok {
			got[mm.Channel] = mm.Payload
		}
	}
	want := map[string]string{
		redlock.ReleaseChannel(n):   n + "\n" + next + ".7",
		redlock.OwnChannel(n, next): n + "\n" + next + ".7",
	}
	if len(got) != len(want) || got[redlock.ReleaseChannel(n)] != want[redlock.ReleaseChannel(n)] || got[redlock.OwnChannel(n, next)] != want[redlock.OwnChannel(n, next)] {
		t.Fatalf("notices = %q, want %q", got, want)
	}
	if ids, err := lead.ZRange(ctx, redlock.QueueKey(n), 0, -1).Result(); err != nil || len(ids) != 2 || ids[0] != next+".7" {
		t.Fatalf("queue after the release = %q, %v; want the waiter past its deadline dropped", ids, err)
	}
}

// TestNamedAttemptRefusedByLeadTakesNothing: a named attempt asks every
// primary at once, but the lead's refusal (another waiter is first in its
// queue) ends it, even though the other primaries, free, granted a
// majority: the queue's order holds, and the attempt's grants are undone.
func TestNamedAttemptRefusedByLeadTakesNothing(t *testing.T) {
	m := nodes(t, 5, nil)
	ctx := t.Context()
	c := open(t, m.URL(), nil)
	n := name(t)
	lead := goredis.NewClient(&goredis.Options{Addr: m.Addrs()[0]})
	defer lead.Close()
	queueWaiter(t, ctx, lead, n, strings.Repeat("d", 32)+".1", 1, 10_000)
	err := redlock.TryNamed(ctx, c, n, strings.Repeat("e", 32)+".1", 10*time.Second)
	if !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("named attempt behind another waiter: err = %v, want ErrNotAcquired", err)
	}
	redlock.Idle(c)
	for i, v := range holders(ctx, m, n) {
		if v != "" {
			t.Fatalf("primary %d holds %q after the refused named attempt", i, v)
		}
	}
	// The same attempt first in line is granted.
	if err := lead.Del(ctx, redlock.QueueKey(n), redlock.QueueDeadlinesKey(n)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redlock.TryNamed(ctx, c, n, strings.Repeat("e", 32)+".1", 10*time.Second); err != nil {
		t.Fatalf("named attempt with nobody queued: %v", err)
	}
}

package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// TestHandOffLabel: a queued waiter's label rides in its liveness key
// ("<TTL>:<client id> <label>", grant.lua), and the release that hands it
// the lock writes its label key ("<fence> <label>") and publishes the
// grant on its Client's channel, whatever the label holds (spaces, colons,
// hex digits, a newline) and whether or not the waiter gave a Client id,
// on the release's hot path (the head is live) and on grant.lua's
// hand_off (a lapsed head is dropped first). A waiter without a label
// gets no label key.
func TestHandOffLabel(t *testing.T) {
	b, rc := newTestBackend(t)
	ctx := t.Context()
	labels := []string{"host/42", "a:b c d", "deadbeef 1", "two\nlines ✓", ""}
	for i, label := range labels {
		for _, cid := range []string{b.hub.id, ""} {
			for _, lapsedHead := range []bool{false, true} {
				t.Run(fmt.Sprintf("label%d/cid=%t/lapsedHead=%t", i, cid != "", lapsedHead), func(t *testing.T) {
					name := uniqueName(t)
					k := keysFor(name)
					a, err := b.TryAcquire(ctx, driver.AcquireRequest{Name: name, Token: tokA, TTL: 30 * time.Second})
					if err != nil {
						t.Fatal(err)
					}
					if lapsedHead {
						queue(t, b, k, driver.AcquireRequest{Name: name, Token: tokC, TTL: 30 * time.Second}, 30*time.Second)
						rc.Del(ctx, k.wait(tokC))
					}
					req := driver.AcquireRequest{Name: name, Token: tokB, TTL: 20 * time.Second, Label: label}
					if _, err := b.attempt(ctx, k, req, 30*time.Second, cid); err == nil {
						t.Fatal("B's attempt was granted, want queued")
					}
					if n := rc.Exists(ctx, k.label(tokB)).Val(); n != 0 {
						t.Fatal("a queued waiter has a label key: the hand-off would not need its liveness key's label")
					}
					channel := k.channel
					if cid != "" {
						channel += ":" + cid
					}
					sub := rc.Subscribe(ctx, channel)
					defer sub.Close()
					if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
						t.Fatal(err)
					}
					if err := a.Release(ctx); err != nil {
						t.Fatal(err)
					}
					if got := rc.Get(ctx, name).Val(); got != tokB {
						t.Fatalf("after the release the lock key holds %q, want B's token", got)
					}
					fence := rc.Get(ctx, k.fence).Val()
					if p := rc.PTTL(ctx, name).Val(); p <= 10*time.Second || p > 20*time.Second {
						t.Fatalf("B's lock key PTTL %v, want B's TTL of 20s", p)
					}
					got, err := rc.Get(ctx, k.label(tokB)).Result()
					switch {
					case label == "" && err == nil:
						t.Fatalf("B gave no label, yet its label key holds %q", got)
					case label != "" && got != fence+" "+label:
						t.Fatalf("B's label key %q (%v), want %q", got, err, fence+" "+label)
					case label != "" && rc.PTTL(ctx, k.label(tokB)).Val() <= 10*time.Second:
						t.Fatalf("B's label key expires in %v, want with its lease (20s)", rc.PTTL(ctx, k.label(tokB)).Val())
					}
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					msg, err := sub.ReceiveMessage(rctx)
					if err != nil {
						t.Fatalf("no grant on %s: %v", channel, err)
					}
					if want := "grant " + tokB + " " + fence; msg.Payload != want {
						t.Fatalf("published %q on %s, want %q", msg.Payload, channel, want)
					}
					if strings.Contains(msg.Payload, label) && label != "" {
						t.Fatal("the grant message carries the label")
					}
				})
			}
		}
	}
}

// TestPreviousLineIgnored: a waiter of the version before this one (its
// token in the list <base>:line[:k]:fencelock, an unlabelled liveness
// value, and a label key "0 <label>") is neither served by this version's
// release nor disturbs it: this version's waiter is handed the lock.
func TestPreviousLineIgnored(t *testing.T) {
	b, rc := newTestBackend(t)
	ctx := t.Context()
	name := uniqueName(t)
	k := keysFor(name)
	old := strings.TrimSuffix(k.queue, bracedLineSuffix) + ":line:k" + escapeSuffix
	if old == k.queue {
		t.Fatalf("the previous version's line %q is this version's", old)
	}
	rc.RPush(ctx, old, tokC)
	rc.Set(ctx, k.wait(tokC), "30000:"+strings.Repeat("e", 32), 30*time.Second)
	rc.Set(ctx, k.label(tokC), "0 old waiter", 30*time.Second)
	a, err := b.TryAcquire(ctx, driver.AcquireRequest{Name: name, Token: tokA, TTL: 30 * time.Second})
	if err != nil {
		t.Fatalf("TryAcquire beside the previous version's line: %v", err)
	}
	queue(t, b, k, driver.AcquireRequest{Name: name, Token: tokB, TTL: 30 * time.Second, Label: "new"}, 30*time.Second)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rc.Get(ctx, name).Val(); got != tokB {
		t.Fatalf("after the release the lock key holds %q, want B's token", got)
	}
	if n := rc.LLen(ctx, old).Val(); n != 1 {
		t.Fatalf("the previous line holds %d, want its 1 waiter untouched", n)
	}
	if got := rc.Get(ctx, k.label(tokC)).Val(); got != "0 old waiter" {
		t.Fatalf("the old waiter's label key became %q", got)
	}
}

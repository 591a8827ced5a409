package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// TestReleaseDropsLabel: every script that frees a labelled grant deletes
// its label key with it (release.lua with nobody in line, its hand-off to
// a live head, its hand_off past a lapsed head, and abandon.lua freeing a
// grant handed to a waiter that gave up), and a release that finds the
// lock no longer ours leaves the new holder's label key alone.
func TestReleaseDropsLabel(t *testing.T) {
	b, rc := newTestBackend(t)
	ctx := t.Context()
	labelled := func(name, token string) driver.AcquireRequest {
		return driver.AcquireRequest{Name: name, Token: token, TTL: 30 * time.Second, Label: "holder " + token[:4]}
	}
	acquire := func(t *testing.T, req driver.AcquireRequest) driver.Lease {
		t.Helper()
		l, err := b.TryAcquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if n := rc.Exists(ctx, keysFor(req.Name).label(req.Token)).Val(); n != 1 {
			t.Fatal("a labelled grant has no label key")
		}
		return l
	}
	gone := func(t *testing.T, k keys, token, when string) {
		t.Helper()
		if v, err := rc.Get(ctx, k.label(token)).Result(); err == nil {
			t.Fatalf("%s, the freed grant's label key still holds %q (PTTL %v)", when, v, rc.PTTL(ctx, k.label(token)).Val())
		}
	}
	for _, waiters := range []string{"none", "live head", "lapsed head"} {
		t.Run("release/"+waiters, func(t *testing.T) {
			name := uniqueName(t)
			k := keysFor(name)
			a := acquire(t, labelled(name, tokA))
			if waiters == "lapsed head" {
				queue(t, b, k, labelled(name, tokC), 30*time.Second)
				rc.Del(ctx, k.wait(tokC))
			}
			if waiters != "none" {
				queue(t, b, k, labelled(name, tokB), 30*time.Second)
			}
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			gone(t, k, tokA, "after the release")
			if waiters != "none" && rc.Exists(ctx, k.label(tokB)).Val() != 1 {
				t.Fatal("the waiter handed the lock has no label key")
			}
		})
	}
	t.Run("abandon of a handed grant", func(t *testing.T) {
		name := uniqueName(t)
		k := keysFor(name)
		a := acquire(t, labelled(name, tokA))
		reqB := labelled(name, tokB)
		queue(t, b, k, reqB, 30*time.Second)
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if rc.Get(ctx, name).Val() != tokB || rc.Exists(ctx, k.label(tokB)).Val() != 1 {
			t.Fatal("the release did not hand B the lock with its label key")
		}
		cause := errors.New("the wait ended")
		if err := b.cleanup(ctx, k, reqB, cause); err != cause {
			t.Fatalf("abandon: %v", err)
		}
		if rc.Exists(ctx, name).Val() != 0 {
			t.Fatal("the abandon left B's grant held")
		}
		gone(t, k, tokB, "after the abandon")
	})
	t.Run("not ours", func(t *testing.T) {
		name := uniqueName(t)
		k := keysFor(name)
		a := acquire(t, labelled(name, tokA))
		rc.Del(ctx, name) // A's lease lapsed ...
		acquire(t, labelled(name, tokB))
		if err := a.Release(ctx); !errors.Is(err, driver.ErrLeaseLost) {
			t.Fatalf("A's release after B took the lock: %v, want ErrLeaseLost", err)
		}
		if rc.Exists(ctx, k.label(tokB)).Val() != 1 {
			t.Fatal("A's release deleted B's label key")
		}
	})
}

package zookeeper_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/zookeeper"
)

// Digest auth from the opener's fields: nodes are created with the digest
// user's ACL, so a client without the credentials can neither queue on the
// lock nor delete the holder's node; one with them can.
func TestDigestAuth(t *testing.T) {
	u := sharedURL(t)
	ctx := t.Context()
	rootPath := fmt.Sprintf("/auth-%d", time.Now().UnixNano())
	url := "zk://" + servers(t, u)[0] + rootPath
	openWith := func(digest string) *fencelock.Client {
		var mux fencelock.URLMux
		mux.Register(zookeeper.Scheme, &zookeeper.URLOpener{Config: zookeeper.Config{Digest: digest}})
		c, err := mux.Open(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	alice, alice2, mallory := openWith("alice:secret"), openWith("alice:secret"), openWith("mallory:guess")
	l, err := alice.TryAcquire(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice2.TryAcquire(ctx, "x", nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("second alice client: %v, want ErrNotAcquired", err)
	}
	_, err = mallory.TryAcquire(ctx, "x", nil)
	if !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("client with other credentials: %v, want zk.ErrNoAuth", err)
	}
	var node string
	l.As(&node)
	raw := rawConn(t, u)
	if err := raw.Delete(node, -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("unauthenticated delete of the holder's node: %v, want zk.ErrNoAuth", err)
	}
	var conn *zk.Conn
	l.As(&conn)
	acl, _, err := conn.GetACL(node)
	if err != nil || len(acl) != 1 || acl[0].Scheme != "digest" {
		t.Fatalf("node ACL %v (%v), want alice's digest only", acl, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := alice2.TryAcquire(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = l2.Release(ctx)
}

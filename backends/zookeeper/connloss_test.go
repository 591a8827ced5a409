package zookeeper_test

import (
	"bytes"
	"net"
	"path"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/backends/zookeeper"
	"github.com/fencelock/fencelock/internal/faultrec"
)

// cutAfterCreate is a connection that, once armed, lets one create request
// of a lock node reach the server and then drops the connection before
// the reply can come back: the create's outcome is unknown to the client.
type cutAfterCreate struct {
	net.Conn
	armed *atomic.Bool
}

func (c *cutAfterCreate) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && bytes.Contains(p, []byte("-lock-")) && c.armed.CompareAndSwap(true, false) {
		// The request is on its way (TCP delivers it before the FIN, and
		// the server applies it); its reply will find no connection.
		_ = c.Conn.Close()
	}
	return n, err
}

// A connection lost after the create request was sent: the backend finds
// its node by the protected prefix (Curator's rule) and does not create a
// second one.
func TestConnectionLossDuringCreate(t *testing.T) {
	u := sharedURL(t)
	rec := faultrec.Begin(t, faultrec.Result{Backend: "zookeeper", Scenario: faultrec.ClientPartitioned, Case: "connection cut mid-create"})
	ctx := t.Context()
	var armed atomic.Bool
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &cutAfterCreate{Conn: c, armed: &armed}, nil
	}
	c, err := zookeeper.New(ctx, &zookeeper.Config{Servers: servers(t, u), Root: root, Dialer: dial}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := name(t)
	warm, err := c.TryAcquire(ctx, n+"-warm", nil) // the session is up, the root exists
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Release(ctx)
	raw := rawConn(t, u)
	// The lock path exists, so the create is the first request cut.
	if _, err := raw.Create(lockPath(n), nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	l, err := c.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if armed.Load() {
		t.Fatal("the connection was never cut: the test did not test anything")
	}
	kids, _, err := raw.Children(lockPath(n))
	if err != nil {
		t.Fatal(err)
	}
	var node string
	l.As(&node)
	rec.Outcome = faultrec.Granted
	rec.Note = "connection cut after a lock node's create was sent, before its reply: the client found its node by the protected prefix on reconnect; no duplicate node"
	if len(kids) != 1 || kids[0] != path.Base(node) {
		t.Fatalf("children %v after a create lost its reply; want only our node %s", kids, path.Base(node))
	}
}

package etcd

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock/election"
)

// TestElectionInterop: etcd's own concurrency.Election on the same lock
// prefix reports fencelock's leader and its proclaimed value (the value of
// our lock key), and fencelock's Inspect reports a Mutex holder (no
// label) with its key's CreateRevision.
func TestElectionInterop(t *testing.T) {
	e := newInteropEnv(t)
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	c := e.client()
	el, err := election.New(c, "leader", nil)
	if err != nil {
		t.Fatal(err)
	}
	term, err := el.Campaign(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	s, err := concurrency.NewSession(e.raw, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	native := concurrency.NewElection(s, LockPrefix(e.keyPrefix, "leader"))
	resp, err := native.Leader(ctx)
	if err != nil || string(resp.Kvs[0].Value) != "node-a" || resp.Kvs[0].CreateRevision != term.Fence().Int64() {
		t.Fatalf("etcd Election.Leader: %v, %v; want node-a at revision %d", resp, err, term.Fence())
	}
	if err := term.Proclaim(ctx, "node-a2"); err != nil {
		t.Fatal(err)
	}
	if resp, err = native.Leader(ctx); err != nil || string(resp.Kvs[0].Value) != "node-a2" {
		t.Fatalf("etcd Election.Leader after Proclaim: %v, %v", resp, err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	m, _ := e.mutex("held-by-mutex")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(context.WithoutCancel(ctx))
	info, err := c.Inspect(ctx, "held-by-mutex")
	if err != nil || !info.Held || info.Label != "" || int64(info.Fence) != m.Header().Revision {
		t.Fatalf("Inspect of a Mutex holder: %+v, %v; want held, no label, fence %d", info, err, m.Header().Revision)
	}
}

package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// deadClient opens a Client with releaseTimeout on a single-member cluster
// of its own, holds a lease with a TTL longer than the test, and returns
// both with the member.
func deadClient(t *testing.T, releaseTimeout time.Duration) (*fencelock.Client, *fencelock.Lease, *testserver.EtcdMember) {
	t.Helper()
	cl := testserver.StartEtcdCluster(t, 1)
	if cl.External {
		testserver.SkipExternal(t, "ETCD_URL names an external server: the test stops a member of its own")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cl.Endpoints(), Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	c := mustNew(t, cli, nil, &fencelock.Options{ReleaseTimeout: releaseTimeout})
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.TryAcquire(t.Context(), "job", &fencelock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c, l, cl.Members[0]
}

// After the server died, Release and Close fail fast: a refused port is
// known at once, not after the request timeout (they took 7.5 s and 5.0 s).
func TestDeadServerReleaseAndCloseFast(t *testing.T) {
	c, l, m := deadClient(t, 5*time.Second)
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := l.Release(t.Context())
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Release with the server dead took %v, want well under the 5s request timeout", took)
	}
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Errorf("Release with the server dead: %v, want ErrUnavailable", err)
	}
	start = time.Now()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close with the server dead took %v, want well under the 5s request timeout", took)
	}
}

// A server that is there but does not answer (paused): Release keeps to
// Options.ReleaseTimeout (it took the request timeout on top) and says the
// store did not answer in time.
func TestPausedServerReleaseWithinTimeout(t *testing.T) {
	const rt = time.Second
	_, l, m := deadClient(t, rt)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Resume() }()
	start := time.Now()
	err := l.Release(t.Context())
	if took := time.Since(start); took > rt+time.Second {
		t.Errorf("Release with the server paused took %v, want about the ReleaseTimeout %v", took, rt)
	}
	if !errors.Is(err, fencelock.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Release with the server paused: %v, want ErrUnavailable or DeadlineExceeded", err)
	}
}

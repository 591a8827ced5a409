package zookeeper_test

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/zookeeper"
	"github.com/fencelock/fencelock/internal/testhelp"
)

const root = "/fencelock-test"

// lockPath is the lock path of name for clients opened on the shared URL.
func lockPath(name string) string { return zookeeper.LockPath(root, name) }

// A go-zookeeper zk.Lock and fencelock on the same path exclude each other,
// both ways, and hand the lock over on release.
func TestInteropGoZookeeperLock(t *testing.T) {
	u := sharedURL(t)
	ctx := t.Context()
	c := open(t, u, nil)
	raw := rawConn(t, u)
	n := name(t)
	zl := zk.NewLock(raw, lockPath(n), zk.WorldACL(zk.PermAll))

	// zk.Lock holds: fencelock cannot take it, and waits for it.
	if err := zl.Lock(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while zk.Lock holds: %v, want ErrNotAcquired", err)
	}
	got := make(chan *fencelock.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, n, nil)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("Acquire returned while zk.Lock holds")
	case <-time.After(300 * time.Millisecond):
	}
	if err := zl.Unlock(); err != nil {
		t.Fatal(err)
	}
	var l *fencelock.Lease
	select {
	case l = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire not granted 10s after zk.Lock's Unlock")
	}
	if l == nil {
		t.FailNow()
	}

	// fencelock holds: zk.Lock waits until Release.
	locked := make(chan error, 1)
	go func() { locked <- zl.Lock() }()
	select {
	case err := <-locked:
		t.Fatalf("zk.Lock returned (%v) while fencelock holds", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-locked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("zk.Lock not granted 10s after Release")
	}
	if _, err := c.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while zk.Lock holds again: %v", err)
	}
	if err := zl.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A kazoo contender (<hex32>__lock__<seq>, created raw) is respected, ahead
// of us and behind us.
func TestInteropKazooNode(t *testing.T) {
	u := sharedURL(t)
	ctx := t.Context()
	c := open(t, u, nil)
	raw := rawConn(t, u)
	n := name(t)
	p := lockPath(n)
	if _, err := raw.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	const kazoo = "/0123456789abcdef0123456789abcdef__lock__"
	k1, err := raw.Create(p+kazoo, nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire behind a kazoo node: %v, want ErrNotAcquired", err)
	}
	got := make(chan *fencelock.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, n, nil)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("Acquire returned while the kazoo node is first")
	case <-time.After(300 * time.Millisecond):
	}
	if err := raw.Delete(k1, -1); err != nil {
		t.Fatal(err)
	}
	var l *fencelock.Lease
	select {
	case l = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire not granted after the kazoo node left")
	}
	if l == nil {
		t.FailNow()
	}
	// A kazoo contender that arrives now queues behind us.
	k2, err := raw.Create(p+kazoo, nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	kids, _, err := raw.Children(p)
	if err != nil {
		t.Fatal(err)
	}
	var ours string
	if !l.As(&ours) {
		t.Fatal("Lease.As(*string) not supported")
	}
	if len(kids) != 2 {
		t.Fatalf("children %v, want ours and the kazoo node", kids)
	}
	seqOurs, _ := zookeeper.SeqOf(path.Base(ours))
	seqK, _ := zookeeper.SeqOf(path.Base(k2))
	if seqOurs >= seqK {
		t.Fatalf("our sequence %d not ahead of the later kazoo node's %d", seqOurs, seqK)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, n, nil); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire behind the second kazoo node: %v", err)
	}
	_ = raw.Delete(k2, -1)
}

var curatorForm = regexp.MustCompile(`^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-[0-9]{10}$`)

// Our node is Curator's protected form, ephemeral, under a container
// parent; the fence is the parent's pzxid as the grant read it (our
// node's czxid when nothing else changed under the parent), and stays
// increasing when the container is deleted and made again (the sequence
// number restarts; the fence does not).
func TestNodeFormAndFence(t *testing.T) {
	u := sharedURL(t)
	ctx := t.Context()
	c := open(t, u, nil)
	raw := rawConn(t, u)
	n := name(t)
	l, err := c.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p string
	l.As(&p)
	if path.Dir(p) != lockPath(n) || !curatorForm.MatchString(path.Base(p)) {
		t.Fatalf("node %q: want %s/_c_<uuid>-lock-<seq>", p, lockPath(n))
	}
	ok, st, err := raw.Exists(p)
	if err != nil || !ok {
		t.Fatalf("Exists(%s) = %v, %v", p, ok, err)
	}
	if st.Czxid != l.Fence().Int64() {
		t.Fatalf("fence %d, want czxid %d (nothing else changed under the lock path)", l.Fence(), st.Czxid)
	}
	_, pst, err := raw.Children(lockPath(n))
	if err != nil || pst.Pzxid != l.Fence().Int64() {
		t.Fatalf("fence %d, lock path's pzxid %d (%v)", l.Fence(), pst.Pzxid, err)
	}
	var conn *zk.Conn
	if !l.As(&conn) || st.EphemeralOwner != conn.SessionID() {
		t.Fatalf("node owner %#x, want our session", st.EphemeralOwner)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The lock path is a container: the server deletes it once empty (the
	// test servers check every 500ms). The next node restarts the
	// sequence at 0, and still gets a greater fence.
	testhelp.Eventually(t, 20*time.Second, func() error {
		ok, _, err := raw.Exists(lockPath(n))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return fmt.Errorf("empty lock path %s still there: not a container", lockPath(n))
		}
		return nil
	})
	l2, err := c.TryAcquire(ctx, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	var p2 string
	l2.As(&p2)
	if seq, _ := zookeeper.SeqOf(path.Base(p2)); seq != 0 {
		t.Errorf("sequence %d after the parent was made again, want 0", seq)
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after the parent was made again, not above %d", l2.Fence(), l.Fence())
	}
}

// Many leases of one TTL on one Client share one session (one heartbeat
// stream) and add no goroutines per lease. (TestHoldManyLeases renews
// them; BenchmarkHold10000 holds 10,000.)
func TestManyLeasesOneSession(t *testing.T) {
	const leases = 300
	u := sharedURL(t)
	ctx := t.Context()
	c := open(t, u, nil)
	n := name(t)
	warm, err := c.TryAcquire(ctx, n+"-warm", nil)
	if err != nil {
		t.Fatal(err)
	}
	var conn0 *zk.Conn
	warm.As(&conn0)
	before := runtime.NumGoroutine()
	held := make([]*fencelock.Lease, 0, leases)
	for i := range leases {
		l, err := c.TryAcquire(ctx, n+"-"+string(rune('a'+i%26))+time.Duration(i).String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	after := runtime.NumGoroutine()
	for _, l := range held {
		var conn *zk.Conn
		if !l.As(&conn) || conn != conn0 {
			t.Fatal("leases of one TTL on different sessions")
		}
	}
	if after-before > 20 {
		t.Errorf("%d goroutines more while holding %d leases", after-before, leases)
	}
	for _, l := range append(held, warm) {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The fence is the lock path's pzxid as the grant read it, not our node's
// czxid: a waiter queued behind us before our grant has a smaller czxid
// than our fence, and still gets a greater fence when its turn comes
// (our delete moved the pzxid past ours).
func TestFenceAboveQueuedWaiter(t *testing.T) {
	u := sharedURL(t)
	ctx := t.Context()
	raw := rawConn(t, u)
	n := name(t)
	p := lockPath(n)
	zl := zk.NewLock(raw, p, zk.WorldACL(zk.PermAll))
	if err := zl.Lock(); err != nil { // a foreign holder: both of ours queue
		t.Fatal(err)
	}
	gotA := acquireAsync(ctx, open(t, u, nil), n, 30*time.Second)
	waitChildren(t, raw, p, 2)
	gotB := acquireAsync(ctx, open(t, u, nil), n, 30*time.Second)
	waitChildren(t, raw, p, 3)
	if err := zl.Unlock(); err != nil {
		t.Fatal(err)
	}
	ga := <-gotA
	if ga.err != nil {
		t.Fatal(ga.err)
	}
	a := ga.l
	var pa string
	a.As(&pa)
	kids, _, err := raw.Children(p)
	if err != nil {
		t.Fatal(err)
	}
	var czxidA, czxidB int64
	for _, k := range kids {
		_, st, err := raw.Exists(p + "/" + k)
		if err != nil {
			t.Fatal(err)
		}
		if p+"/"+k == pa {
			czxidA = st.Czxid
		} else {
			czxidB = st.Czxid
		}
	}
	if len(kids) != 2 || czxidA == 0 || czxidB == 0 {
		t.Fatalf("contenders %v, want A's and B's", kids)
	}
	if !(czxidA < czxidB && czxidB <= a.Fence().Int64()) {
		t.Fatalf("czxid A %d, czxid B %d, fence A %d: want A's fence at least B's czxid (B queued before A's grant)", czxidA, czxidB, a.Fence())
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	gb := <-gotB
	if gb.err != nil {
		t.Fatal(gb.err)
	}
	b := gb.l
	defer b.Release(ctx)
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
	}
}

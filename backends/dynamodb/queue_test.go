package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testhelp"
	"github.com/fencelock/fencelock/internal/testserver"
)

// queueOf reads the lock's wait queue straight from the table.
func queueOf(tb testing.TB, api *ddb.Client, table, key string) []string {
	tb.Helper()
	out, err := api.GetItem(tb.Context(), &ddb.GetItemInput{
		TableName: &table, Key: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		tb.Fatal(err)
	}
	l, _ := out.Item["waitQueue"].(*types.AttributeValueMemberL)
	if l == nil {
		return nil
	}
	q := make([]string, len(l.Value))
	for i, v := range l.Value {
		q[i] = v.(*types.AttributeValueMemberS).Value
	}
	return q
}

// awaitQueueLen reads the queue until it holds n entries (the waiters
// have joined it: no other signal says a waiter is blocked in the store).
func awaitQueueLen(tb testing.TB, api *ddb.Client, table, key string, n int) {
	tb.Helper()
	testhelp.Eventually(tb, 5*time.Second, func() error {
		if q := queueOf(tb, api, table, key); len(q) != n {
			return fmt.Errorf("the wait queue holds %d entries %q, want %d (the waiters never joined it)", len(q), q, n)
		}
		return nil
	})
}

// TestQueueArrivalOrder: Clients blocked on one lock are granted it in
// the order they joined its queue, and the holder that releases cannot
// take it back with TryAcquire while they wait. It fails with the queue
// turned off (dynamodb.SetNoQueue): nobody joins, and the releaser's
// TryAcquire re-grabs.
func TestQueueArrivalOrder(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	holder := open(t, d.URL(), nil)
	api, table, n := native(t, holder), tableOf(t, d.URL()), name(t)
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	l, err := holder.TryAcquire(ctx, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	order := make(chan int, waiters)
	errs := make(chan error, waiters)
	for i := range waiters {
		c := open(t, d.URL(), nil)
		go func() {
			lw, err := c.Acquire(ctx, n, opts)
			if err != nil {
				errs <- err
				return
			}
			order <- i
			errs <- lw.Release(ctx)
		}()
		awaitQueueLen(t, api, table, n, i+1)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if again, err := holder.TryAcquire(ctx, n, opts); !errors.Is(err, fencelock.ErrNotAcquired) {
		if err == nil {
			_ = again.Release(ctx)
		}
		t.Fatalf("the releaser's TryAcquire with %d waiters queued: %v, want ErrNotAcquired", waiters, err)
	}
	for want := range waiters {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if got := <-order; got != want {
			t.Fatalf("grant %d went to waiter %d, want %d (arrival order)", want, got, want)
		}
	}
	if q := queueOf(t, api, table, n); len(q) != 0 {
		t.Fatalf("the queue holds %q after every waiter was served", q)
	}
}

// TestQueueNoStarvation: Clients looping Acquire and Release on one lock
// share it evenly (each joins the back of the queue when it comes back),
// never two at a time, with fences rising in grant order. With the queue
// turned off the releaser re-grabs almost every time and this fails.
func TestQueueNoStarvation(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	n := name(t)
	const workers, grants = 4, 60
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	var (
		total, holding atomic.Int64
		mu             sync.Mutex
		counts         [workers]int
		lastFence      fencelock.Fence
		last, regrabs  = -1, 0
		wg             sync.WaitGroup
		errs           = make(chan error, workers)
	)
	for i := range workers {
		c := open(t, d.URL(), nil)
		wg.Go(func() {
			for total.Load() < grants {
				l, err := c.Acquire(ctx, n, opts)
				if err != nil {
					errs <- err
					return
				}
				if holding.Add(1) != 1 {
					errs <- errors.New("two holders at once")
				}
				total.Add(1)
				mu.Lock()
				counts[i]++
				if last == i {
					regrabs++
				}
				last = i
				if l.Fence() <= lastFence {
					errs <- errors.New("fence did not rise")
				}
				lastFence = l.Fence()
				mu.Unlock()
				holding.Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sum := 0
	for _, c := range counts {
		sum += c
	}
	t.Logf("grants per worker %v, %d re-grabs of %d", counts, regrabs, sum)
	for i, c := range counts {
		if c < grants/workers/2 {
			t.Errorf("worker %d held the lock %d times of %d, want at least %d (a fair share is %d)", i, c, sum, grants/workers/2, sum/workers)
		}
	}
	if regrabs > sum/5 {
		t.Errorf("%d of %d grants went to the worker that had just released, want at most %d", regrabs, sum, sum/5)
	}
}

// TestQueueDeadWaiter: a waiter whose wait ends (ctx cancelled, Client
// closed) leaves the queue before its Acquire returns; one that died
// without leaving (an entry nobody refreshes) holds the queue up for its
// lapse time from when the others first saw it, then is dropped by a
// blocked Acquire or by TryAcquire.
func TestQueueDeadWaiter(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	holder := open(t, d.URL(), nil)
	api, table, n := native(t, holder), tableOf(t, d.URL()), name(t)
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	hold := func() *fencelock.Lease {
		t.Helper()
		l, err := holder.TryAcquire(ctx, n, opts)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// The waiter behind the dead one must be served long before the 10s
	// lapse a dead waiter with this TTL could cost.
	served := func(l *fencelock.Lease, c *fencelock.Client, within time.Duration) {
		t.Helper()
		got := make(chan error, 1)
		go func() {
			lw, err := c.Acquire(ctx, n, opts)
			if err == nil {
				err = lw.Release(ctx)
			}
			got <- err
		}()
		awaitQueueLen(t, api, table, n, 1)
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(within):
			t.Fatalf("the next waiter was not served within %v of the release", within)
		}
		t.Logf("next waiter served %v after the release", time.Since(released))
	}
	next := open(t, d.URL(), nil)

	// A cancelled wait.
	l := hold()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	quitter := open(t, d.URL(), nil)
	go func() { _, err := quitter.Acquire(cctx, n, opts); done <- err }()
	awaitQueueLen(t, api, table, n, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v", err)
	}
	if q := queueOf(t, api, table, n); len(q) != 0 {
		t.Fatalf("the cancelled waiter left %q in the queue", q)
	}
	served(l, next, 2*time.Second)

	// A closed Client.
	l = hold()
	gone, err := fencelock.DefaultURLMux().Open(ctx, d.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, err := gone.Acquire(ctx, n, opts); done <- err }()
	awaitQueueLen(t, api, table, n, 1)
	_ = gone.Close()
	if err := <-done; !errors.Is(err, fencelock.ErrClosed) {
		t.Fatalf("Acquire of a closed Client: %v", err)
	}
	if q := queueOf(t, api, table, n); len(q) != 0 {
		t.Fatalf("the closed Client's waiter left %q in the queue", q)
	}
	served(l, next, 2*time.Second)

	// A dead waiter: an entry (lapse 300ms) that nobody refreshes or
	// removes. A blocked Acquire drops it once it has watched it
	// unchanged for 300ms.
	const lapse = 300 * time.Millisecond
	dead := func() {
		t.Helper()
		_, err := api.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName: &table, Key: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: n}},
			UpdateExpression:         aws.String("SET #q = list_append(#q, :e)"),
			ExpressionAttributeNames: map[string]string{"#q": "waitQueue"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":e": &types.AttributeValueMemberL{Value: []types.AttributeValue{
				&types.AttributeValueMemberS{Value: randHex(16) + " 1 300"}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	l = hold()
	dead()
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lw, err := next.Acquire(ctx, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := lw.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if took < lapse {
		t.Fatalf("the lock was taken %v after the release, before the dead waiter's %v lapse: its entry was not respected", took, lapse)
	}
	if bound := lapse + 200*time.Millisecond + margin; took > bound {
		t.Fatalf("a dead waiter held the lock up for %v, want at most %v (its lapse, a poll interval and a margin)", took, bound)
	}

	// TryAcquire is refused while the dead entry may be alive, and drops
	// it once this Client has watched it for its lapse.
	l = hold()
	dead()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := next.TryAcquire(ctx, n, opts); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with a waiter queued: %v, want ErrNotAcquired", err)
	}
	time.Sleep(lapse) // a duration under test: the entry's lapse
	lt, err := next.TryAcquire(ctx, n, opts)
	if err != nil {
		t.Fatalf("TryAcquire after watching a dead waiter's entry for its %v lapse: %v", lapse, err)
	}
	_ = lt.Release(ctx)
}

// TestQueueAllLeaveAtOnce: eight blocked Acquires whose ctx ends at once
// all take their entries out of the queue before they return (each
// removal shifts the others' indexes), so the next waiter is not held
// up by entries that would only lapse after their lapse time. It failed
// with at most three read-and-remove tries per leaver.
func TestQueueAllLeaveAtOnce(t *testing.T) {
	d := testserver.StartDynalite(t)
	key := name(t)
	holder := open(t, d.URL(), nil)
	api := native(t, holder)
	table := tableOf(t, d.URL())
	l, err := holder.TryAcquire(t.Context(), key, noRenew)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(context.WithoutCancel(t.Context())) }()
	const n = 8
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		c := open(t, d.URL(), nil)
		wg.Go(func() {
			_, err := c.Acquire(ctx, key, noRenew)
			errs <- err
		})
	}
	awaitQueueLen(t, api, table, key, n)
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled Acquire returned %v, want context.Canceled", err)
		}
	}
	if q := queueOf(t, api, table, key); len(q) != 0 {
		t.Errorf("after all %d waiters returned, the queue still holds %q", n, q)
	}
}

// handOffLine makes a line on lock n: a holds it, then b and each of
// rest queue up behind (a rest with inject appends its own entry), and a
// releases, so that b takes the lock itself from the head of the line
// and sees who waits behind it. It returns b's lease and the channels
// the rest's Acquires report on (nil for an injected entry).
func handOffLine(t *testing.T, api *ddb.Client, table, n string, opts *fencelock.AcquireOptions, a, b *fencelock.Client, rest ...waiterOf) (*fencelock.Lease, []chan acquired) {
	t.Helper()
	ctx := t.Context()
	la, err := a.TryAcquire(ctx, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	bch := make(chan acquired, 1)
	go func() { l, err := b.Acquire(ctx, n, opts); bch <- acquired{l, err, time.Now()} }()
	awaitQueueLen(t, api, table, n, 1)
	var chs []chan acquired
	for i, r := range rest {
		var ch chan acquired
		if r.inject != nil {
			r.inject()
		} else {
			ch = make(chan acquired, 1)
			go func() { l, err := r.c.Acquire(r.ctx, n, opts); ch <- acquired{l, err, time.Now()} }()
		}
		awaitQueueLen(t, api, table, n, 2+i)
		chs = append(chs, ch)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-bch
	if got.err != nil {
		t.Fatal(got.err)
	}
	return got.l, chs
}

type waiterOf struct {
	c      *fencelock.Client
	ctx    context.Context
	inject func() // instead of c's Acquire: append an entry
}

type acquired struct {
	l   *fencelock.Lease
	err error
	at  time.Time
}

// TestHandOff: a holder that took the lock from the head of the line
// releases it by writing the next waiter's ownership (one write; the
// waiter sends no acquire write), with the fence one above its own.
func TestHandOff(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	w := newWire()
	a, b := open(t, d.URL(), nil), open(t, d.URL(), nil)
	c := openWire(t, d.URL(), w, 3)
	api, table, n := native(t, a), tableOf(t, d.URL()), name(t)
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	lb, chs := handOffLine(t, api, table, n, opts, a, b, waiterOf{c: c, ctx: ctx})
	w.take()
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-chs[0]
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.l.Release(ctx)
	if ops := w.take(); ops["UpdateItem"] != 0 {
		t.Errorf("the waiter handed the lock sent %v: want reads only", ops)
	}
	if got.l.Fence() != lb.Fence()+1 {
		t.Errorf("handed-off fence %d after %d, want %d", got.l.Fence(), lb.Fence(), lb.Fence()+1)
	}
	if q := queueOf(t, api, table, n); len(q) != 0 {
		t.Errorf("queue after the hand-off: %q", q)
	}
	if info, err := a.Inspect(ctx, n); err != nil || !info.Held || info.Label != got.l.Label() {
		t.Errorf("Inspect after the hand-off: %+v, %v; want held with label %q", info, err, got.l.Label())
	}
}

// TestHandOffToLeavingWaiter: a waiter whose Acquire ends after the lock
// was handed to it (before it read so) passes the lock on as it leaves:
// the next waiter gets it at once, not after the lease duration.
func TestHandOffToLeavingWaiter(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	w := newWire()
	a, b, next := open(t, d.URL(), nil), open(t, d.URL(), nil), open(t, d.URL(), nil)
	c := openWire(t, d.URL(), w, 3)
	api, table, n := native(t, a), tableOf(t, d.URL()), name(t)
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lb, chs := handOffLine(t, api, table, n, opts, a, b, waiterOf{c: c, ctx: cctx}, waiterOf{c: next, ctx: ctx})
	open, parked := w.holdReads() // c does not learn of the hand-off
	// c's one poller waits at the gate: no read of c's that the hand-off
	// could answer is in flight.
	select {
	case <-parked:
	case <-time.After(5 * time.Second):
		open()
		t.Fatal("c's poller sent no read within 5s")
	}
	if err := lb.Release(ctx); err != nil {
		open()
		t.Fatal(err)
	}
	cancel()
	released := time.Now()
	open()
	if got := <-chs[0]; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("the leaving waiter's Acquire: %v, want context.Canceled", got.err)
	}
	select {
	case got := <-chs[1]:
		if got.err != nil {
			t.Fatal(got.err)
		}
		t.Logf("next waiter served %v after the release", got.at.Sub(released))
		if got.l.Fence() != lb.Fence()+2 {
			t.Errorf("fence %d, want %d (passed on by the leaving waiter)", got.l.Fence(), lb.Fence()+2)
		}
		_ = got.l.Release(ctx)
	case <-time.After(3 * time.Second):
		t.Fatal("the next waiter was not served within 3s of the release: the lock handed to the leaving waiter was not passed on")
	}
}

// TestHandOffToDeadWaiter: a lock handed to a waiter that died (its
// entry, with a 300ms lease, nobody's) is taken by the next waiter once
// it has watched the handed version unchanged for that lease.
func TestHandOffToDeadWaiter(t *testing.T) {
	d := testserver.StartDynalite(t)
	ctx := t.Context()
	a, b, next := open(t, d.URL(), nil), open(t, d.URL(), nil), open(t, d.URL(), nil)
	api, table, n := native(t, a), tableOf(t, d.URL()), name(t)
	opts := &fencelock.AcquireOptions{TTL: 10 * time.Second, AutoRenew: fencelock.Bool(false)}
	// b takes the lock from the head of the line, with a dead entry
	// (lease 300ms) and next queued up behind it.
	const lease = 300 * time.Millisecond
	ghost := func() {
		if _, err := api.UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName: &table, Key: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: n}},
			UpdateExpression:         aws.String("SET #q = list_append(#q, :e)"),
			ExpressionAttributeNames: map[string]string{"#q": "waitQueue"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":e": &types.AttributeValueMemberL{Value: []types.AttributeValue{
				&types.AttributeValueMemberS{Value: randHex(16) + " 1 10000 300 ghost "}}}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	lb, chs := handOffLine(t, api, table, n, opts, a, b, waiterOf{inject: ghost}, waiterOf{c: next, ctx: ctx})
	nch := chs[1]
	released := time.Now()
	if err := lb.Release(ctx); err != nil { // hands off to the ghost
		t.Fatal(err)
	}
	if info, err := a.Inspect(ctx, n); err != nil || !info.Held {
		t.Fatalf("after the hand-off to the dead waiter: %+v, %v; want held", info, err)
	}
	select {
	case g := <-nch:
		if g.err != nil {
			t.Fatal(g.err)
		}
		took := g.at.Sub(released)
		t.Logf("next waiter served %v after the hand-off to the dead waiter", took)
		if took < lease {
			t.Errorf("the next waiter took the lock %v after it was handed to the dead waiter, before its %v lease", took, lease)
		}
		if g.l.Fence() != lb.Fence()+2 {
			t.Errorf("fence %d, want %d", g.l.Fence(), lb.Fence()+2)
		}
		_ = g.l.Release(ctx)
	case <-time.After(lease + 3*time.Second):
		t.Fatal("the next waiter was not served within 3s of the dead waiter's lease")
	}
}

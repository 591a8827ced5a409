package dynamodb

// Pacing (internals; the package doc in doc.go has what users need).
//
// DynamoDB has no batched conditional write that fails item by item (a
// transaction fails whole), so a Client holding many leases sends one
// UpdateItem per lease per renewal: 10,000 leases taken within seconds
// renew in bursts of thousands of requests. Sent as they come, they queue
// for the HTTP client's connections, where the per-request timeout
// (request_timeout) already runs: requests time out before they are sent
// or while the server works through the burst, the client resets the
// connection (dynalite 4.0 throws on such aborts; testserver's guard
// keeps it alive), and the SDK's retries add to the burst. Of 10,000
// leases with a 60s TTL, 1,423 were lost (BenchmarkHold10000); 1,481 of
// 1,500 renewals sent at once through a 1s request timeout failed
// (TestBurstWaitsOutsideRequestTimeout). With the window: none.
//
// So every request of a Client passes through a window of at most
// maxInFlight requests in flight. A request waits for its place on its
// own ctx (a renewal's ctx runs to the lease's validity deadline, far
// past request_timeout), and its HTTP timeout starts only once it is
// sent. A burst thus leaves the process at the rate the server serves
// it, and the server sees a bounded number of connections.
//
// Throttling (ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded) is retried by the SDK's standard retryer with its
// exponential backoff and jitter (the retryer the SDK expects; clients
// opened from a URL drop only its client-side retry quota, which after a
// burst of timeouts would refuse requests the service would serve). On
// top of that the window halves when a request comes back throttled
// after the SDK's retries, and grows back by one for each request served,
// between minInFlight and maxInFlight (additive increase, multiplicative
// decrease), so a throttled table is not hammered by the whole window.

import (
	"context"
	"errors"
	"sync"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
)

// The request window of one Client (see Pacing, atop this file).
const (
	maxInFlight = 32
	minInFlight = 2
)

// pacer is a window of requests in flight, shrunk by throttling.
type pacer struct {
	mu      sync.Mutex
	limit   int             // the window: requests allowed in flight
	busy    int             // requests in flight
	waiters []chan struct{} // blocked requests, first come first
}

func newPacer() *pacer { return &pacer{limit: maxInFlight} }

// enter waits, on ctx, for a place in the window.
func (p *pacer) enter(ctx context.Context) error {
	p.mu.Lock()
	if p.busy < p.limit && len(p.waiters) == 0 {
		p.busy++
		p.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	p.waiters = append(p.waiters, ch)
	p.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, w := range p.waiters {
			if w == ch {
				p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
				return context.Cause(ctx)
			}
		}
		// Granted meanwhile: hand the place on.
		p.busy--
		p.wake()
		return context.Cause(ctx)
	}
}

// leave frees a place; err is the request's outcome, which adjusts the
// window.
func (p *pacer) leave(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy--
	var ae smithy.APIError
	switch {
	case err != nil && errors.As(err, &ae) && throttled(ae.ErrorCode()):
		p.limit = max(p.limit/2, minInFlight)
	case p.limit < maxInFlight:
		p.limit++
	}
	p.wake()
}

// wake admits waiters while the window has room. Callers hold mu.
func (p *pacer) wake() {
	for p.busy < p.limit && len(p.waiters) > 0 {
		p.busy++
		close(p.waiters[0])
		p.waiters = p.waiters[1:]
	}
}

// paced is an API whose requests pass through a pacer.
type paced struct {
	api API
	p   *pacer
}

func (a *paced) GetItem(ctx context.Context, in *ddb.GetItemInput, optFns ...func(*ddb.Options)) (*ddb.GetItemOutput, error) {
	if err := a.p.enter(ctx); err != nil {
		return nil, err
	}
	out, err := a.api.GetItem(ctx, in, optFns...)
	a.p.leave(err)
	return out, err
}

func (a *paced) UpdateItem(ctx context.Context, in *ddb.UpdateItemInput, optFns ...func(*ddb.Options)) (*ddb.UpdateItemOutput, error) {
	if err := a.p.enter(ctx); err != nil {
		return nil, err
	}
	out, err := a.api.UpdateItem(ctx, in, optFns...)
	a.p.leave(err)
	return out, err
}

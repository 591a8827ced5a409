package dynamodb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/smithy-go"
)

// TestPacerWindow: the window admits maxInFlight requests, queues the
// next until one leaves, halves on a throttled request (not on other
// errors) down to minInFlight, and grows back by one per request served.
func TestPacerWindow(t *testing.T) {
	p := newPacer()
	ctx := context.Background()
	for range maxInFlight {
		if err := p.enter(ctx); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := p.enter(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("request %d entered a full window (err %v)", maxInFlight+1, err)
	}
	admitted := make(chan error, 1)
	go func() { admitted <- p.enter(ctx) }()
	p.leave(nil)
	if err := <-admitted; err != nil {
		t.Fatal(err)
	}
	p.leave(errors.New("a network error"))
	if p.limit != maxInFlight {
		t.Fatalf("window %d after a non-throttling error, want %d", p.limit, maxInFlight)
	}
	throttle := &smithy.GenericAPIError{Code: "ThrottlingException", Fault: smithy.FaultClient}
	p.leave(throttle)
	if p.limit != maxInFlight/2 {
		t.Fatalf("window %d after a throttled request, want %d", p.limit, maxInFlight/2)
	}
	for range 10 {
		p.leave(&smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException"})
		p.busy++ // keep the count of requests in flight unchanged
	}
	if p.limit != minInFlight {
		t.Fatalf("window %d after many throttles, want the floor %d", p.limit, minInFlight)
	}
	p.leave(nil)
	p.busy++
	if p.limit != minInFlight+1 {
		t.Fatalf("window %d after a request served, want %d", p.limit, minInFlight+1)
	}
}

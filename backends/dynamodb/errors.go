package dynamodb

// Ambiguous outcomes (internals; the package doc in doc.go has what users need).
//
// An acquire write whose result is unknown (ctx ended or the connection
// broke after it was sent) is followed, on a detached context, by a write
// that marks the item released if it holds this attempt's version (or,
// for a takeover, still holds the version watched), so nothing is left
// held; if that write fails too, the error wraps ErrIndeterminate. A
// conditional write that the SDK retried and that then failed its
// condition may have been applied by an earlier attempt: a consistent
// read settles it (the lease is ours if the item holds our version); if
// that read fails too, a heartbeat or release stays of unknown outcome
// (ErrUnavailable, its version kept as a candidate), never ErrLeaseLost
// on a guess.
// Heartbeats and releases of unknown outcome keep the version they may
// have written as a candidate, so the next one is conditional on any of
// them (recordVersionNumber IN (...)). A queue write of unknown outcome
// (join, refresh, drop) ends the Acquire with its error, and the Acquire
// leaves the queue before returning (an SDK retry of an applied join is
// refused, as the entry is already in line). One window remains: an acquire
// request delayed inside the network or a stalled server past its
// cleanup may still be applied later; the lock is then held by nobody
// until others have watched its version for a lease duration.
//
// Errors and timeouts (internals; the package doc in doc.go has what users need).
//
// A refused condition is ErrNotAcquired (acquire) or ErrLeaseLost
// (heartbeat, release). Throttling, 5xx and network errors, after the
// SDK's retries, wrap ErrUnavailable; a missing table or a wrong key
// schema is ErrInvalid with the schema to create. Clients opened from a
// URL bound each HTTP request (request_timeout, 5s by default) and do not
// use the SDK's client-side retry quota. Credentials never appear in URLs,
// logs or errors.

import (
	"context"
	"errors"
	"fmt"
	"net"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fencelock/fencelock/driver"
)

// call records what the SDK did for one operation, across its retries: a
// middleware placed after the SDK's retry middleware sees every attempt.
type call struct {
	attempts int  // attempts made
	sent     bool // some attempt may have reached the server
}

type callKey struct{}

// attemptsMiddleware counts the attempts of the operation whose ctx
// carries a *call, and notes whether any may have reached the server (an
// attempt that failed to dial did not).
var attemptsMiddleware = middleware.FinalizeMiddlewareFunc("fencelockAttempts",
	func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleFinalize(ctx, in)
		if c, ok := ctx.Value(callKey{}).(*call); ok {
			c.attempts++
			if err == nil || !dialError(err) {
				c.sent = true
			}
		}
		return out, md, err
	})

// withAttempts installs attemptsMiddleware for one operation.
func withAttempts(o *ddb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Finalize.Insert(attemptsMiddleware, "Retry", middleware.After)
	})
}

// track returns ctx carrying a fresh *call for one operation.
func track(ctx context.Context) (context.Context, *call) {
	c := &call{}
	return context.WithValue(ctx, callKey{}, c), c
}

// dialError reports whether err shows that no connection was made (so the
// request cannot have been applied).
func dialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// conditionFailed reports whether err is DynamoDB's
// ConditionalCheckFailedException.
func conditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// classify wraps an SDK error once, with the driver sentinel it means:
//   - the ctx error when ctx ended (errors.Is(err, ctx.Err()) holds);
//   - ErrInvalid for a missing table (with the key schema to create);
//   - nothing more for a request DynamoDB refuses as wrong (validation,
//     access denied, bad credentials): retrying will not help;
//   - ErrUnavailable for throttling, server errors and network errors,
//     after the SDK's own retries.
func classify(ctx context.Context, op, table string, err error) error {
	var rnf *types.ResourceNotFoundException
	var ae smithy.APIError
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return fmt.Errorf("dynamodb %s: %w", op, err)
	case ctx.Err() != nil:
		return fmt.Errorf("dynamodb %s: %w (%w)", op, ctx.Err(), err)
	case errors.As(err, &rnf):
		return fmt.Errorf("%w: dynamodb %s: %w", driver.ErrInvalid, op, missingTable(table))
	case errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient && !throttled(ae.ErrorCode()):
		return fmt.Errorf("dynamodb %s: %w", op, err)
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() >= 400 && re.HTTPStatusCode() < 500 && !errors.As(err, &ae) {
		return fmt.Errorf("dynamodb %s: %w", op, err)
	}
	return fmt.Errorf("%w: dynamodb %s: %w; check that the endpoint and region are right and the service is reachable", driver.ErrUnavailable, op, err)
}

// throttled reports whether a client-fault error code means "slow down",
// which is the service being unavailable to us, not a bad request.
func throttled(code string) bool {
	switch code {
	case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
		"LimitExceededException", "TransactionInProgressException":
		return true
	}
	return false
}

// missingTable explains a missing table.
func missingTable(table string) error {
	return fmt.Errorf("table %q does not exist: create it with partition key %q of type S (string) and no sort key, or open with create_table=true", table, attrKey)
}

// Package dynamodb is the fencelock backend for Amazon DynamoDB (scheme
// dynamodb://), through aws-sdk-go-v2. It speaks the protocol of the AWS
// DynamoDB Lock Client (awslabs/amazon-dynamodb-lock-client): a lease is
// an item whose record version number changes on every heartbeat, and a
// waiter may take the lock only after watching that version stay unchanged
// for a whole lease duration. No clock is compared across machines. To that
// protocol it adds a fencing token that never goes back.
//
// # Opening
//
// With the package imported (a blank import suffices), by URL:
//
//	locks, err := fencelock.Open(ctx, "dynamodb://locks?region=eu-west-1")
//	locks, err := fencelock.Open(ctx, "dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:8000&create_table=true&dummy_credentials=true")
//
// The URL is dynamodb://TABLE. Query parameters, besides fencelock's own
// prefix, ttl and wait:
//
//	region=us-east-1        AWS region (default: the SDK's config chain)
//	endpoint=http://h:8000  a non-AWS endpoint (dynalite, DynamoDB Local)
//	create_table=true       create TABLE (on-demand billing) if missing (default false)
//	poll_interval=50ms      Config.PollInterval (default: lease duration/20, 10ms to 200ms)
//	owner=NAME              Config.Owner (default: the host name)
//	mixed_fleet=true        Config.MixedFleet (default false)
//	request_timeout=5s      per-request HTTP timeout (default 5s)
//	dummy_credentials=true  fixed dummy credentials, for local emulators (default false)
//
// Credentials come from the SDK's default chain unless URLOpener sets them;
// they never appear in URLs, logs or errors. Opening checks the table's key
// schema. In Go, New takes an SDK client (or any [API]) and a [Config]
// whose Table is required. The table has partition key "key" of type S and
// no sort key (the AWS Lock Client's default); [CreateTable] makes one.
//
// The backend needs the IAM actions dynamodb:GetItem and
// dynamodb:UpdateItem on the table, dynamodb:DescribeTable when opened from
// a URL, and dynamodb:CreateTable only with create_table=true.
//
// # Fences and expiry
//
// The fence is the item's numeric fence attribute, raised by one in the
// conditional write that grants: strict ([driver.FenceStrict]), since
// fencelock never deletes an item (release marks it released). Expiry is
// decided by observation (TimeClient): an abandoned lock is taken a full
// lease duration after a waiter first read it, not after the holder's last
// heartbeat; [fencelock.Lease.StoreTTL] reports that bound (TTL plus two
// poll intervals). The minimum TTL is 100 ms. Blocked Acquires queue in the item's
// waitQueue (at most 16 entries) and are served in the order they joined;
// they poll the item with consistent reads, at most PollInterval apart
// (Options.Backoff is not used). A holder that took the lock from the
// head of the queue releases it by writing the next waiter's ownership
// (one write), which that waiter sees at its next read; a waiter that
// dies after joining may thus be handed the lock, which then waits out
// the lease duration it asked for. An Acquire or TryAcquire whose ctx ends
// while a write that may grant or queue it is on its way waits for that
// write's outcome (at most 2s more), so that it leaves no entry or grant
// behind (a grant that came is released before the ctx error returns).
// A Client's blocked Acquires of one lock
// queue up in the Client first, in arrival order, and only the first of
// them joins waitQueue and polls: a Client costs the table one waiter's
// requests per lock, however many of its goroutines wait.
//
// # Many leases
//
// DynamoDB has no batch of conditional writes that succeed or fail one by
// one, so every lease costs one conditional UpdateItem per renewal (each
// TTL/3 with AutoRenew): 10,000 leases with a 60s TTL are 500 writes a
// second. A Client keeps at most 32 requests in flight; the others wait
// their turn on their own context, before the HTTP request timeout
// starts, so a burst of renewals leaves at the rate the table serves it
// instead of timing out in the connection pool. When DynamoDB throttles
// (ProvisionedThroughputExceededException, ThrottlingException) the SDK's
// retryer backs off as usual, and a request still throttled after its
// retries halves the window (it grows back by one per request served,
// down to 2 at the least). Provision the table for the renewal rate, or
// use on-demand billing. One Client on one dynalite (a loaded 2-core
// machine) held 10,000 leases with a 60s TTL for three TTLs without
// losing one.
//
// # Interop with the AWS Lock Client
//
// A lock whose name after [fencelock.Options].Prefix is K is the item with
// key = K, holding the AWS Lock Client's attributes (ownerName
// "<Owner>/<token>", recordVersionNumber, leaseDuration in milliseconds,
// isReleased, data kept untouched) plus fencelock's fence, waitQueue and
// fencelockLabel. The two exclude each other both ways. The AWS Lock
// Client ignores waitQueue, so a mixed fleet gets mutual exclusion but no
// fairness. With its defaults it replaces (PutItem) and deletes items,
// which wipes the fence: the next fencelock grant starts from its client
// clock in microseconds, so declare such a fleet with Config.MixedFleet
// (mixed_fleet=true) and fences are time-floored. cirello-io/dynamolock's
// "20s" leaseDuration form is read; whether it reads fencelock's
// milliseconds was not verified. A foreign item with a missing or
// malformed attribute is an error naming it, never taken over.
//
// # Inspect
//
// [fencelock.Client.Inspect] is one consistent read: the label, the fence,
// the remaining time as this Client observes it (a first read sees the
// whole lease duration) and the number of waitQueue entries. SetLabel is
// supported.
//
// # As
//
// [fencelock.Client.As] gives the SDK client: *[API] always, **ddb.Client
// (ddb being aws-sdk-go-v2/service/dynamodb) when it is one.
//
// # Errors
//
// A refused condition is [fencelock.ErrNotAcquired] (acquire) or
// [fencelock.ErrLeaseLost] (heartbeat, release). Throttling, 5xx and network
// errors, after the SDK's retries, wrap [fencelock.ErrUnavailable]; a
// missing table or a wrong key schema is [fencelock.ErrInvalid]. An acquire
// of unknown outcome that could not be undone wraps
// [fencelock.ErrIndeterminate].
package dynamodb

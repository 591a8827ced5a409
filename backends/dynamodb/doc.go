// Package dynamodb is the fencelock backend for Amazon DynamoDB (scheme
// dynamodb://), through aws-sdk-go-v2. It speaks the protocol of the AWS
// DynamoDB Lock Client (awslabs/amazon-dynamodb-lock-client): a lease is
// an item whose record version number (a UUID) changes on every heartbeat,
// and a waiter may take the lock only after watching that version stay
// unchanged for a whole lease duration. No clock is compared across machines. To that protocol it adds
// a fencing token that never goes back.
//
//	import (
//		ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
//		"github.com/fencelock/fencelock/backends/dynamodb"
//	)
//
//	locks := dynamodb.New(ddb.NewFromConfig(awsCfg), dynamodb.Config{Table: "locks"}, nil)
//
// or, with the package imported (a blank import suffices), by URL:
//
//	locks, err := fencelock.Open(ctx, "dynamodb://locks?region=eu-west-1")
//	locks, err := fencelock.Open(ctx, "dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:8000&create_table=true&dummy_credentials=true")
//
// See URLOpener for the URL's parameters. Client.As gives the SDK client:
// *dynamodb.API always, **ddb.Client when it is one.
//
// # Table and item layout
//
// The table has partition key "key" of type S and no sort key (the AWS
// Lock Client's default; CreateTable or create_table=true makes one with
// on-demand billing). A lock whose store key is K (the name after
// Options.Prefix) is the item with key = K:
//
//   - key (S): K.
//   - ownerName (S): "<Config.Owner>/<token>", the token new for every
//     grant (32 hex characters). Heartbeat and release are conditional on
//     it.
//   - recordVersionNumber (S): a random UUID, new on every acquire,
//     heartbeat and release. Every write is conditional on it.
//   - leaseDuration (S): the lease TTL in decimal milliseconds, as the AWS
//     Lock Client writes it ("20000"); rewritten by each heartbeat.
//   - isReleased (S): "1" once released, absent while held (the AWS Lock
//     Client's representation: it treats the attribute's presence as
//     released).
//   - data (B): optional, the AWS Lock Client's payload. fencelock never
//     writes it and keeps it.
//   - fence (N): fencelock's fencing token.
//   - waitQueue (L of S): fencelock's blocked Acquires in arrival order
//     (see Waiting), at most 16 entries "<token> <count> <lapse ms>", so
//     the item stays under 1 KB; an empty list when nobody waits.
//
// fencelock never deletes an item: release marks it released, so the
// fence stays with the name.
//
// # Operations
//
//   - Acquire: ONE conditional UpdateItem: SET ownerName, a new
//     recordVersionNumber, leaseDuration, fence = if_not_exists(fence,
//     <client clock in µs>) + 1, REMOVE isReleased, on the condition
//     attribute_not_exists(key) OR isReleased = "1" AND
//     attribute_not_exists(waitQueue[0]) [OR recordVersionNumber = <the
//     version this Client watched unchanged for its lease duration> AND
//     attribute_not_exists(waitQueue[0])]: the lock is free and nobody
//     waits (the first waiter in line conditions on waitQueue[0] = <its
//     entry> instead, and the write removes that entry). ReturnValues
//     gives the new fence. A refused write is followed by one consistent GetItem that
//     records what holds the lock and who waits (the observation, below).
//   - Heartbeat (Extend): one UpdateItem conditional on our version and
//     ownerName, writing a new version and leaseDuration.
//   - Release: one UpdateItem conditional on our version and ownerName,
//     setting isReleased = "1" and a new version. A condition failure is
//     ErrLeaseLost: another holder's lock is never touched.
//
// Acquire and release are one conditional write each (a test counts the
// requests). The waiters' writes (Waiting) touch waitQueue alone: they
// never change ownerName, recordVersionNumber, isReleased or fence, so
// they neither disturb the holder's conditions nor restart anyone's
// observation of it.
//
// # Expiry by observation
//
// DynamoDB keeps no lease clock, and the clocks of the machines sharing a
// table are not trusted to agree, so expiry is decided by observation
// (Capabilities.TimeAuthority is TimeClient), as in the AWS Lock Client.
// Each Client remembers, per lock it found held, the record version and
// the local monotonic time at which it first read it (the receipt of the
// read, which is after the holder sent the write that made that version).
// Once the version has stayed unchanged for the item's leaseDuration from
// then, the Client may take the lock with a write conditional on that
// exact version; a heartbeat in between changes the version, and the
// write fails. The holder's local validity deadline runs from when it sent
// its last successful write, less drift, so it always ends before a
// waiter can have watched a full lease.
//
// The cost: an abandoned lock is taken a full lease duration after the
// waiter FIRST READ it, not after the holder's last heartbeat. A waiter
// that arrives late waits a whole lease; Lease.StoreTTL reports the
// bound (the TTL plus two poll intervals) for sizing such waits. A blocked
// Acquire keeps its observation between polls, and so does a later
// TryAcquire on the same Client (the memory is per Client, bounded to
// 10,000 locks).
//
// # Waiting: a queue in the item
//
// Blocked Acquires (driver.Blocker) wait in line in the item's waitQueue
// and are served in the order they joined it:
//
//   - Join: an Acquire whose first write is refused reads the item and
//     appends its entry with one conditional UpdateItem (list_append, only
//     if the item exists, the queue has fewer than 16 entries and not this
//     entry already). While the queue is full, later waiters poll and join
//     when a place frees.
//   - Take: only the first waiter in line takes the lock, when it is
//     released, gone, or its version watched unchanged for its lease
//     duration, with the acquire write conditional on waitQueue[0] being
//     its entry, which the same write removes. Everyone else's acquire
//     write (a later arrival, TryAcquire, the releaser coming back) is
//     refused while anyone waits, even on a released lock: TryAcquire
//     returns ErrNotAcquired saying that waiters queued first. So the
//     releaser cannot re-grab, and a holder that crashed is taken over by
//     the first waiter in line.
//   - Refresh: a waiter rewrites its entry (a higher count) every third
//     of its lapse time, with a write conditional on the entry at its
//     index. The lapse time is the TTL the waiter asked for, at most 10s.
//   - Lapse: an entry is watched like a lease: once a Client has seen the
//     same entry unchanged for its lapse time since its first read of it
//     (local monotonic time; no clocks compared), a blocked Acquire or a
//     TryAcquire of that Client removes it with a write conditional on the
//     entry at its index. A waiter that died thus holds the line up for
//     at most its lapse time after the others first saw its entry (plus a
//     poll). Dead waiters seen by the same read lapse together, and a
//     blocked Acquire drops them one write each without waiting between
//     (TryAcquire drops at most one per call). A live waiter that stalled
//     past its lapse finds its entry gone and joins again at the back.
//     A dead waiter with a lapse longer than the holder's lease delays the
//     takeover of an abandoned lock past Lease.StoreTTL, by up to the
//     difference.
//   - Leave: an Acquire that ends without the lock (ctx ended, Client
//     closed, an error) removes its entry before it returns, on a
//     detached context (read, then remove conditional on the entry at its
//     index; up to three tries). If that fails the entry lapses.
//
// Waiters read the item with a consistent GetItem: after a quarter of the
// time since they last saw the lock change hands or themselves move up in
// line, between 5ms and Config.PollInterval (by default the held item's
// lease duration / 20, between 10ms and 200ms), times their place in line
// (the first waits least), jittered down to half, and no later than the
// watched version's expiry or their next refresh. A lock that changes
// hands often is read often, a long-held one at most every
// PollInterval; a released lock is taken within one such wait plus a read
// and a write. Polls are reads, which cost less than refused conditional
// writes. The portable Backoff is not used.
//
// Capabilities.FIFO is false: the order holds among the first 16 waiters,
// for waiters that refresh in time, and on items no other client
// rewrites. The AWS Lock Client ignores waitQueue (an attribute it does not
// know): it takes a released or expired lock without regard to fencelock's
// waiters, and its PutItem (acquire) and DeleteItem (release) wipe the
// queue, after which the waiters find their entries gone and join again,
// in the order their next reads come. Mixed fleets therefore get no
// fairness from the queue, only mutual exclusion.
//
// # Fences
//
// The fence is the item's numeric fence attribute, raised by one in the
// same conditional write that grants, so two grants of one name can never
// share a fence, and every grant's fence is above the one before it while
// the attribute survives. With fencelock alone on the table it always
// does (DynamoDB is durable and fencelock never deletes the item), so
// Capabilities.Fence is FenceStrict.
//
// Mixed fleets: the AWS Lock Client with its defaults replaces the whole
// item when it acquires (PutItem) and deletes it when it releases, which
// wipes fence. The next fencelock grant then finds no fence and starts
// from the granting client's clock in microseconds (about 1.8e15; fences
// fit an int64 and are exact as JSON numbers). That is above every
// earlier fence as long as that client's clock is not behind the clock of
// the client that issued the last one by more than the time between the
// two grants (a foreign hold lasts at least a round trip, usually
// seconds; NTP keeps clocks within milliseconds). Declare such a fleet
// with Config.MixedFleet (mixed_fleet=true): Capabilities.Fence is then
// FenceTimeFloored.
//
// # What the AWS Lock Client sees of our locks, and we of theirs
//
// They exclude each other both ways: the AWS Lock Client reads our items
// as its own (our fence is one more attribute to it), waits a lease
// duration on our version like on any other, takes our released items
// (isReleased = "1") even while fencelock waiters are queued (it ignores
// waitQueue; see Waiting), and its heartbeat and release conditions never
// match our versions. We read its items (ownerName, recordVersionNumber,
// leaseDuration, isReleased) the same way; an item it deleted is free, one
// it marked released is taken at once. cirello-io/dynamolock uses the
// same attribute names but writes leaseDuration as a Go duration ("20s"):
// fencelock reads that form too (and so waits on such locks for their
// real lease); whether that client reads the milliseconds form fencelock
// writes was not verified, so test before sharing a table with it. A
// foreign item with a missing or malformed attribute (no
// recordVersionNumber, a leaseDuration that is neither milliseconds nor a
// Go duration, an isReleased other than "1", a waitQueue that is not a
// list of strings) is an error naming the attribute: it is never taken
// over. Items with a sort key are
// another table layout and are not supported (opening checks the schema).
//
// # Ambiguous outcomes
//
// An acquire write whose result is unknown (ctx ended or the connection
// broke after it was sent) is followed, on a detached context, by a write
// that marks the item released if it holds this attempt's version (or,
// for a takeover, still holds the version watched), so nothing is left
// held; if that write fails too, the error wraps ErrIndeterminate. A
// conditional write that the SDK retried and that then failed its
// condition may have been applied by an earlier attempt: a consistent
// read settles it (the lease is ours if the item holds our version).
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
// # Errors and timeouts
//
// A refused condition is ErrNotAcquired (acquire) or ErrLeaseLost
// (heartbeat, release). Throttling, 5xx and network errors, after the
// SDK's retries, wrap ErrUnavailable; a missing table or a wrong key
// schema is ErrInvalid with the schema to create. Clients opened from a
// URL bound each HTTP request (request_timeout, 5s by default) and do not
// use the SDK's client-side retry quota. Credentials never appear in URLs,
// logs or errors.
//
// # IAM
//
// The backend needs dynamodb:GetItem and dynamodb:UpdateItem on the
// table, and dynamodb:DescribeTable when opened from a URL (it checks the
// key schema); dynamodb:CreateTable only with create_table=true.
//
// # Admin
//
// driver.Admin (for the conformance suite, not handed out by Client.As): Expire marks an item released
// with a new version, keeping its fence; KillSessions simulates a network
// partition of this client's held leases (DynamoDB has no sessions).
//
// # Labels and Inspect
//
// The label is the item's attribute fencelockLabel (S), set by the granting
// UpdateItem (no extra request) and by SetLabel (an owner-checked write,
// like a heartbeat's). The AWS Lock Client sees it as an additional
// attribute and drops it when it writes the item itself. Inspect is one
// consistent GetItem: the lock reads as held unless the item is released or
// this Client has watched its version unchanged for its lease duration (the
// read joins the Client's observation memory); the remaining time is what
// is left of that duration since this Client first read the version (a
// Client reading for the first time sees the whole duration); waiters are
// the waitQueue's entries.
package dynamodb

package dynamodb

// Table and item layout (internals; the package doc in doc.go has what users need).
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
//     (see Waiting, atop queue.go), at most 16 entries "<token> <count> <lapse ms>", so
//     the item stays under 1 KB; an empty list when nobody waits.
//
// fencelock never deletes an item: release marks it released, so the
// fence stays with the name.
//
// What the AWS Lock Client sees of our locks, and we of theirs (internals; the package doc in doc.go has what users need).
//
// They exclude each other both ways: the AWS Lock Client reads our items
// as its own (our fence is one more attribute to it), waits a lease
// duration on our version like on any other, takes our released items
// (isReleased = "1") even while fencelock waiters are queued (it ignores
// waitQueue; see Waiting, atop queue.go), and its heartbeat and release conditions never
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

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock/driver"
)

// The item layout: the AWS DynamoDB Lock Client's attribute names and
// representations (see the layout atop this file), plus fence.
const (
	attrKey      = "key"                 // S, partition key: the lock's store key
	attrOwner    = "ownerName"           // S
	attrRVN      = "recordVersionNumber" // S, a new UUID on every write
	attrLease    = "leaseDuration"       // S, decimal milliseconds
	attrReleased = "isReleased"          // S "1" when released, absent otherwise
	attrData     = "data"                // B, optional, never written by fencelock
	attrFence    = "fence"               // N, fencelock's fencing token
	attrQueue    = "waitQueue"           // L of S, fencelock's waiters in arrival order
	attrLabel    = "fencelockLabel"      // S, the holder's label (AcquireOptions.Label)

	releasedValue = "1"
)

// The expression attribute names every request uses.
var exprNames = map[string]string{
	"#k":   attrKey,
	"#on":  attrOwner,
	"#rvn": attrRVN,
	"#ld":  attrLease,
	"#ir":  attrReleased,
	"#f":   attrFence,
	"#q":   attrQueue,
	"#lb":  attrLabel,
}

// names returns the subset of exprNames an expression uses (DynamoDB
// rejects unused names).
func names(keys ...string) map[string]string {
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		m[k] = exprNames[k]
	}
	return m
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func num(n uint64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatUint(n, 10)}
}

func keyOf(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrKey: str(name)}
}

// newRVN returns a random (version 4) UUID in its 36-character text form,
// as the AWS Lock Client writes record version numbers.
func newRVN() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// leaseMillis is ttl in whole milliseconds, rounded up, as leaseDuration
// holds it: waiters wait at least as long as the holder believes it holds.
func leaseMillis(ttl time.Duration) string {
	return strconv.FormatInt(int64((ttl+time.Millisecond-1)/time.Millisecond), 10)
}

// lockItem is what a read found under a lock's key.
type lockItem struct {
	owner    string
	rvn      string
	lease    time.Duration
	released bool
	fence    driver.Fence // 0 when the item has no fence (written by another client)
	queue    []string     // waitQueue entries, first in line first
	hasQueue bool         // the item has a waitQueue attribute (an empty list, say)
	label    string       // "" when the item has none (written by another client)
}

// malformedError says which attribute of a foreign item is missing or
// malformed. Such an item is never taken over.
type malformedError struct {
	key, attr, why string
}

func (e *malformedError) Error() string {
	return fmt.Sprintf("the DynamoDB item of lock %q has %s attribute %q: it was not written by fencelock or the AWS DynamoDB Lock Client, so fencelock will not take it over; fix or delete the item",
		e.key, e.why, e.attr)
}

// parseItem reads a lock item. A missing or malformed attribute is an error
// naming it; an attribute the layout does not know is ignored.
func parseItem(key string, item map[string]types.AttributeValue) (lockItem, error) {
	var it lockItem
	s := func(attr string, required bool) (string, bool, error) {
		v, ok := item[attr]
		if !ok {
			if required {
				return "", false, &malformedError{key, attr, "no"}
			}
			return "", false, nil
		}
		sv, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			return "", false, &malformedError{key, attr, fmt.Sprintf("a non-string (%T)", v)}
		}
		return sv.Value, true, nil
	}
	var err error
	if it.owner, _, err = s(attrOwner, true); err != nil {
		return it, err
	}
	if it.rvn, _, err = s(attrRVN, true); err != nil {
		return it, err
	}
	if it.rvn == "" {
		return it, &malformedError{key, attrRVN, "an empty"}
	}
	ld, _, err := s(attrLease, true)
	if err != nil {
		return it, err
	}
	if it.lease, err = parseLease(ld); err != nil {
		return it, &malformedError{key, attrLease, fmt.Sprintf("a malformed (%q, want decimal milliseconds)", ld)}
	}
	ir, present, err := s(attrReleased, false)
	if err != nil {
		return it, err
	}
	if present && ir != releasedValue {
		return it, &malformedError{key, attrReleased, fmt.Sprintf("an unexpected (%q, want %q)", ir, releasedValue)}
	}
	it.released = present
	if v, ok := item[attrFence]; ok {
		nv, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			return it, &malformedError{key, attrFence, fmt.Sprintf("a non-number (%T)", v)}
		}
		f, err := strconv.ParseUint(nv.Value, 10, 63)
		if err != nil {
			return it, &malformedError{key, attrFence, fmt.Sprintf("a malformed (%q)", nv.Value)}
		}
		it.fence = driver.Fence(f)
	}
	if v, ok := item[attrLabel].(*types.AttributeValueMemberS); ok {
		it.label = v.Value
	}
	if v, ok := item[attrQueue]; ok {
		it.hasQueue = true
		lv, ok := v.(*types.AttributeValueMemberL)
		if !ok {
			return it, &malformedError{key, attrQueue, fmt.Sprintf("a non-list (%T)", v)}
		}
		for _, e := range lv.Value {
			sv, ok := e.(*types.AttributeValueMemberS)
			if !ok {
				return it, &malformedError{key, attrQueue, fmt.Sprintf("a non-string element (%T) in its", e)}
			}
			it.queue = append(it.queue, sv.Value)
		}
	}
	return it, nil
}

// parseLease reads a leaseDuration: decimal milliseconds, as the AWS Lock
// Client writes it, or a Go duration ("20s"), as cirello-io/dynamolock
// writes it.
func parseLease(s string) (time.Duration, error) {
	const most = 366 * 24 * time.Hour
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 || ms > int64(most/time.Millisecond) {
			return 0, fmt.Errorf("lease duration %d ms out of range", ms)
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > most {
		return 0, fmt.Errorf("lease duration %q: not milliseconds nor a Go duration", s)
	}
	return d, nil
}

// fenceFrom reads the fence from the attributes an UpdateItem returned.
func fenceFrom(attrs map[string]types.AttributeValue) (driver.Fence, error) {
	v, ok := attrs[attrFence].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("the acquire write returned no numeric %q attribute (got %v)", attrFence, attrs[attrFence])
	}
	f, err := strconv.ParseUint(v.Value, 10, 63)
	if err != nil || f == 0 {
		return 0, fmt.Errorf("the acquire write returned a malformed %q %q", attrFence, v.Value)
	}
	return driver.Fence(f), nil
}

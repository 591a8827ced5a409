package dynamodb

// Admin (internals; the package doc in doc.go has what users need).
//
// driver.Admin (for the conformance suite, not handed out by Client.As): Expire marks an item released
// with a new version, keeping its fence; KillSessions simulates a network
// partition of this client's held leases (DynamoDB has no sessions).

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock/driver"
)

// Expire implements driver.Admin: it marks the lock's item released with a
// new record version, keeping its fence, as an operator (or the AWS Lock
// Client's releaseLock) would. The holder is not told; its next heartbeat
// finds another version and reports the lease lost, and any client may
// take the lock at once. It returns nil if there is no item.
func (b *backend) Expire(ctx context.Context, name string) error {
	_, err := b.api.UpdateItem(ctx, &ddb.UpdateItemInput{
		TableName:                &b.cfg.Table,
		Key:                      keyOf(name),
		ConditionExpression:      aws.String("attribute_exists(#k)"),
		UpdateExpression:         aws.String("SET #ir = :rel, #rvn = :new"),
		ExpressionAttributeNames: names("#k", "#ir", "#rvn"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":rel": str(releasedValue),
			":new": str(newRVN()),
		},
	})
	if err != nil && !conditionFailed(err) {
		return fmt.Errorf("expire: %w", classify(ctx, "expire", b.cfg.Table, err))
	}
	return nil
}

// KillSessions implements driver.Admin. DynamoDB has no sessions: the
// equivalent fault is a network partition between this client and
// DynamoDB. KillSessions simulates it for every lease held through this
// backend: their heartbeats and releases fail from now on as if DynamoDB
// were unreachable (ErrUnavailable, no request sent), so each lease ends
// at its local validity deadline, and other clients take the lock after
// watching its record version unchanged for a lease duration. New
// acquires are not affected.
func (b *backend) KillSessions(context.Context) error {
	b.cut.Add(1)
	return nil
}

var _ driver.FenceAdmin = (*backend)(nil)

// StoredFence implements driver.FenceAdmin: the fence attribute of the
// lock's item (a consistent read), which the next grant's fence must
// exceed. ok is false if there is no item or it carries no fence.
func (b *backend) StoredFence(ctx context.Context, name string) (driver.Fence, bool, error) {
	out, err := b.get(ctx, name)
	if err != nil {
		return 0, false, fmt.Errorf("stored fence: %w", classify(ctx, "read", b.cfg.Table, err))
	}
	f, ok := out.Item[attrFence].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(f.Value, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("stored fence: the item's fence %q is not a number: %w", f.Value, err)
	}
	return driver.Fence(v), true, nil
}

// DropFenceState implements driver.FenceAdmin: it removes the fence
// attribute from the lock's item and writes a new record version, as the
// AWS Lock Client's PutItem or DeleteItem would; the next grant's fence
// then restarts from the client's clock (the floor).
func (b *backend) DropFenceState(ctx context.Context, name string) error {
	_, err := b.api.UpdateItem(ctx, &ddb.UpdateItemInput{
		TableName:                 &b.cfg.Table,
		Key:                       keyOf(name),
		ConditionExpression:       aws.String("attribute_exists(#k)"),
		UpdateExpression:          aws.String("SET #rvn = :new REMOVE #f"),
		ExpressionAttributeNames:  names("#k", "#f", "#rvn"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":new": str(newRVN())},
	})
	if err != nil && !conditionFailed(err) {
		return fmt.Errorf("drop fence state: %w", classify(ctx, "drop fence state", b.cfg.Table, err))
	}
	return nil
}

var _ driver.QueueAdmin = (*backend)(nil)

// Waiters implements driver.QueueAdmin: the entries of the item's
// waitQueue (a consistent read). An entry whose waiter left stays until
// it lapses, so this may count a waiter that gave up.
func (b *backend) Waiters(ctx context.Context, name string) (int, error) {
	out, err := b.get(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("waiters: %w", classify(ctx, "read", b.cfg.Table, err))
	}
	if out.Item == nil {
		return 0, nil
	}
	it, err := parseItem(name, out.Item)
	if err != nil {
		return 0, err
	}
	return len(it.queue), nil
}

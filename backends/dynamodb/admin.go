package dynamodb

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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

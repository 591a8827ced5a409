package peers

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoPoll is how often the baseline's Wait retries: fencelock's
// default poll interval for a TTL of 15s (TTL/20, capped at 200 ms).
const DynamoPoll = 200 * time.Millisecond

// dynamoBaselineImpl is the AWS DynamoDB Lock Client's protocol written
// plainly on aws-sdk-go-v2 (no served Go port of that client exists):
// acquire = PutItem conditional on attribute_not_exists(key) with a new
// recordVersionNumber; release = DeleteItem conditional on that
// recordVersionNumber. Wait retries every DynamoPoll. Unfenced.
func dynamoBaselineImpl(endpoint, table string) Impl {
	return Impl{
		ID: "dynamodb/lockclient-protocol", Store: "dynamodb", Library: "github.com/aws/aws-sdk-go-v2",
		Notes: "AWS Lock Client protocol written plainly: conditional PutItem (new recordVersionNumber), release = conditional DeleteItem; Wait retries every 200 ms; unfenced",
		Open: func(ctx context.Context) (Lock, error) {
			c := ddb.New(ddb.Options{
				Region:       "us-east-1",
				BaseEndpoint: aws.String(endpoint),
				Credentials:  credentials.NewStaticCredentialsProvider("dummy", "dummy", ""),
			})
			if _, err := c.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(table)}); err != nil {
				return nil, err
			}
			return dynamoLock{c, table, rand.Text()}, nil
		},
	}
}

type dynamoLock struct {
	c     *ddb.Client
	table string
	owner string
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func (d dynamoLock) Try(ctx context.Context, key string) (Unlock, bool, error) {
	rvn := rand.Text()
	_, err := d.c.PutItem(ctx, &ddb.PutItemInput{
		TableName: aws.String(d.table),
		Item: map[string]types.AttributeValue{
			"key": str("base-" + key), "ownerName": str(d.owner), "recordVersionNumber": str(rvn),
			"leaseDuration": str(strconv.FormatInt(TTL.Milliseconds(), 10)),
		},
		ConditionExpression:      aws.String("attribute_not_exists(#k)"),
		ExpressionAttributeNames: map[string]string{"#k": "key"},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	unlock := func(ctx context.Context) error {
		_, err := d.c.DeleteItem(ctx, &ddb.DeleteItemInput{
			TableName:                 aws.String(d.table),
			Key:                       map[string]types.AttributeValue{"key": str("base-" + key)},
			ConditionExpression:       aws.String("#r = :r AND #o = :o"),
			ExpressionAttributeNames:  map[string]string{"#r": "recordVersionNumber", "#o": "ownerName"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":r": str(rvn), ":o": str(d.owner)},
		})
		return err
	}
	return unlock, true, nil
}

func (d dynamoLock) Wait(ctx context.Context, key string) (Unlock, error) {
	t := time.NewTicker(DynamoPoll)
	defer t.Stop()
	for {
		u, ok, err := d.Try(ctx, key)
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		if ok {
			return u, nil
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-t.C:
		}
	}
}

func (d dynamoLock) Close() error { return nil }

package dynamodb_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// awsClient issues exactly the requests of the AWS DynamoDB Lock Client
// (AmazonDynamoDBLockClient.java) with its defaults: acquire by PutItem
// (the whole item replaced), heartbeat by UpdateItem of leaseDuration and
// recordVersionNumber, release by DeleteItem (deleteLockOnRelease) or by
// setting isReleased = "1". All conditional as that client makes them.
type awsClient struct {
	c     *ddb.Client
	table string
	owner string
	lease time.Duration
}

// awsLock is a lock the emulated client holds.
type awsLock struct {
	key, rvn string
}

func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func (a *awsClient) item(key, rvn string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"key":                 &types.AttributeValueMemberS{Value: key},
		"ownerName":           &types.AttributeValueMemberS{Value: a.owner},
		"leaseDuration":       &types.AttributeValueMemberS{Value: strconv.FormatInt(a.lease.Milliseconds(), 10)},
		"recordVersionNumber": &types.AttributeValueMemberS{Value: rvn},
	}
}

// get is the client's consistent GetItem.
func (a *awsClient) get(ctx context.Context, key string) (map[string]types.AttributeValue, error) {
	out, err := a.c.GetItem(ctx, &ddb.GetItemInput{TableName: &a.table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: key}}})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// acquire is acquireLock: read the item; put a new one if there is none
// or it is released; else watch its record version for its lease
// duration (polling every refresh) and put over it if it did not change.
// It gives up after wait, returning an error.
func (a *awsClient) acquire(ctx context.Context, key string, refresh, wait time.Duration) (*awsLock, error) {
	start := time.Now()
	var watched string
	var watchedAt time.Time
	var watchedLease time.Duration
	for {
		it, err := a.get(ctx, key)
		if err != nil {
			return nil, err
		}
		rvn := uuid()
		var cond string
		vals := map[string]types.AttributeValue{}
		nms := map[string]string{"#pk": "key"}
		switch {
		case it == nil:
			cond = "attribute_not_exists(#pk)"
		case it["isReleased"] != nil:
			cond = "attribute_exists(#pk) AND #ir = :ir"
			nms["#ir"] = "isReleased"
			vals[":ir"] = &types.AttributeValueMemberS{Value: "1"}
		default:
			cur := it["recordVersionNumber"].(*types.AttributeValueMemberS).Value
			ld, _ := strconv.ParseInt(it["leaseDuration"].(*types.AttributeValueMemberS).Value, 10, 64)
			if cur != watched {
				watched, watchedAt, watchedLease = cur, time.Now(), time.Duration(ld)*time.Millisecond
			}
			if time.Since(watchedAt) >= watchedLease {
				cond = "attribute_exists(#pk) AND #rvn = :rvn"
				nms["#rvn"] = "recordVersionNumber"
				vals[":rvn"] = &types.AttributeValueMemberS{Value: watched}
			}
		}
		if cond != "" {
			in := &ddb.PutItemInput{TableName: &a.table, Item: a.item(key, rvn), ConditionExpression: &cond, ExpressionAttributeNames: nms}
			if len(vals) > 0 {
				in.ExpressionAttributeValues = vals
			}
			if _, err := a.c.PutItem(ctx, in); err != nil {
				return nil, err
			}
			return &awsLock{key: key, rvn: rvn}, nil
		}
		if time.Since(start) > wait {
			return nil, fmt.Errorf("aws client: lock %s not acquired within %v (version %s watched for %v)", key, wait, watched, time.Since(watchedAt))
		}
		time.Sleep(refresh)
	}
}

// heartbeat is sendHeartbeat.
func (a *awsClient) heartbeat(ctx context.Context, l *awsLock) error {
	rvn := uuid()
	_, err := a.c.UpdateItem(ctx, &ddb.UpdateItemInput{
		TableName:           &a.table,
		Key:                 map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: l.key}},
		ConditionExpression: aws.String("attribute_exists(#pk) AND #rvn = :rvn AND #on = :on"),
		UpdateExpression:    aws.String("SET #ld = :ld, #rvn = :newRvn"),
		ExpressionAttributeNames: map[string]string{"#pk": "key", "#rvn": "recordVersionNumber",
			"#on": "ownerName", "#ld": "leaseDuration"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":rvn":    &types.AttributeValueMemberS{Value: l.rvn},
			":on":     &types.AttributeValueMemberS{Value: a.owner},
			":ld":     &types.AttributeValueMemberS{Value: strconv.FormatInt(a.lease.Milliseconds(), 10)},
			":newRvn": &types.AttributeValueMemberS{Value: rvn},
		},
	})
	if err == nil {
		l.rvn = rvn
	}
	return err
}

// release is releaseLock: DeleteItem when del (the default), else
// SET isReleased = "1"; conditional on version and owner.
func (a *awsClient) release(ctx context.Context, l *awsLock, del bool) error {
	key := map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: l.key}}
	cond := aws.String("attribute_exists(#pk) AND #rvn = :rvn AND #on = :on")
	nms := map[string]string{"#pk": "key", "#rvn": "recordVersionNumber", "#on": "ownerName"}
	vals := map[string]types.AttributeValue{
		":rvn": &types.AttributeValueMemberS{Value: l.rvn},
		":on":  &types.AttributeValueMemberS{Value: a.owner},
	}
	if del {
		_, err := a.c.DeleteItem(ctx, &ddb.DeleteItemInput{TableName: &a.table, Key: key, ConditionExpression: cond,
			ExpressionAttributeNames: nms, ExpressionAttributeValues: vals})
		return err
	}
	nms["#ir"] = "isReleased"
	vals[":ir"] = &types.AttributeValueMemberS{Value: "1"}
	_, err := a.c.UpdateItem(ctx, &ddb.UpdateItemInput{TableName: &a.table, Key: key, ConditionExpression: cond,
		UpdateExpression: aws.String("SET #ir = :ir"), ExpressionAttributeNames: nms, ExpressionAttributeValues: vals})
	return err
}

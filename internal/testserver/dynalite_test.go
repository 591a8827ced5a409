package testserver

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func dynaliteClient(d *Dynalite) *ddb.Client {
	return ddb.New(ddb.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(d.Endpoint()),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		RetryMaxAttempts: 1,
	})
}

func createTable(ctx context.Context, c *ddb.Client) error {
	_, err := c.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            aws.String("ttt"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("k"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("k"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		return err
	}
	// Even with --createTableMs 0 the table turns ACTIVE asynchronously.
	w := ddb.NewTableExistsWaiter(c, func(o *ddb.TableExistsWaiterOptions) { o.MinDelay = 20 * time.Millisecond })
	return w.Wait(ctx, &ddb.DescribeTableInput{TableName: aws.String("ttt")}, 10*time.Second)
}

func putGet(ctx context.Context, c *ddb.Client, put bool) (map[string]types.AttributeValue, error) {
	key := map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: "x"}}
	if put {
		if _, err := c.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String("ttt"), Item: key}); err != nil {
			return nil, err
		}
	}
	out, err := c.GetItem(ctx, &ddb.GetItemInput{TableName: aws.String("ttt"), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// TestDynalitePersist: with --path, a killed and restarted server keeps
// its tables and items, on the same port; a paused one answers nothing
// until resumed.
func TestDynalitePersist(t *testing.T) {
	d := StartDynaliteProcess(t, &DynaliteOptions{Persist: true})
	if d.Dir == "" || !strings.Contains(d.URL(), d.Endpoint()) {
		t.Fatalf("Dir %q, URL %q, Endpoint %q", d.Dir, d.URL(), d.Endpoint())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dynaliteClient(d)
	if err := createTable(ctx, c); err != nil {
		t.Fatal(err)
	}
	if it, err := putGet(ctx, c, true); err != nil || it == nil {
		t.Fatalf("put/get: %v %v", it, err)
	}
	if err := d.Proc.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := putGet(ctx, c, false); err == nil {
		t.Fatal("GetItem succeeded after Kill")
	}
	if err := d.Proc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if it, err := putGet(ctx, c, false); err != nil || it == nil {
		t.Fatalf("item after a restart with --path: %v %v, want it kept", it, err)
	}

	if err := d.Proc.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := putGet(pctx, c, false)
	pcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetItem on a paused server: %v, want DeadlineExceeded", err)
	}
	if err := d.Proc.Resume(); err != nil {
		t.Fatal(err)
	}
	if it, err := putGet(ctx, c, false); err != nil || it == nil {
		t.Fatalf("after Resume: %v %v", it, err)
	}
}

// TestDynaliteInMemory: without --path a restart comes back empty.
func TestDynaliteInMemory(t *testing.T) {
	d := StartDynaliteProcess(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dynaliteClient(d)
	if err := createTable(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := d.Proc.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var rnf *types.ResourceNotFoundException
	if _, err := putGet(ctx, c, true); !errors.As(err, &rnf) {
		t.Fatalf("after an in-memory restart: %v, want ResourceNotFound (empty server)", err)
	}
}

func TestDynaliteCLIEnv(t *testing.T) {
	t.Setenv(DynaliteEnv, "/nonexistent/cli.js")
	if _, err := DynaliteCLI(); !errors.Is(err, ErrMissing) {
		t.Fatalf("DynaliteCLI with a bad %s: %v, want ErrMissing", DynaliteEnv, err)
	}
}

// TestDynaliteSurvivesAbortedRequest: a client that closes its connection
// in the middle of a request body (a cancelled request) does not kill the
// server (plain dynalite 4.0 crashes on it).
func TestDynaliteSurvivesAbortedRequest(t *testing.T) {
	d := StartDynaliteProcess(t, nil)
	for range 3 {
		conn, err := net.Dial("tcp", Addr(d.Port))
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\n\r\n{"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the server is reading the body
		conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := dynaliteClient(d)
	if err := createTable(ctx, c); err != nil {
		t.Fatalf("dynalite after aborted requests: %v\n%s", err, d.Proc.Output())
	}
	if !strings.Contains(d.Proc.Output(), "ignored a request aborted") {
		t.Errorf("the guard did not report the aborted requests:\n%s", d.Proc.Output())
	}
}

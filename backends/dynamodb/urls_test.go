package dynamodb_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/dynamodb"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestURLInvalid: every malformed URL is ErrInvalid, said before any I/O,
// and never echoes a secret.
func TestURLInvalid(t *testing.T) {
	const base = "dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:1"
	cases := []struct{ url, want string }{
		{base + "&colour=blue", "colour"},
		{base + "&create_table=maybe", "create_table"},
		{base + "&mixed_fleet=2", "mixed_fleet"},
		{base + "&dummy_credentials=yes-please", "dummy_credentials"},
		{base + "&poll_interval=-1s", "poll_interval"},
		{base + "&poll_interval=soon", "poll_interval"},
		{base + "&request_timeout=0s", "request_timeout"},
		{base + "&owner=", "owner"},
		{base + "&region=eu-west-1", "given 2 times"},
		{"dynamodb://locks?region=us-east-1&endpoint=ftp://host", "endpoint"},
		{"dynamodb://locks?region=us-east-1&endpoint=127.0.0.1:8000", "endpoint"},
		{"dynamodb://ab?region=us-east-1", "table name"},
		{"dynamodb://?region=us-east-1", "table name"},
		{"dynamodb://locks/sub?region=us-east-1", "path"},
		{"dynamodb://AKIDEXAMPLE:wJalrSECRET@locks?region=us-east-1", "no credentials"},
	}
	for _, tc := range cases {
		_, err := fencelock.Open(t.Context(), tc.url)
		if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want ErrInvalid mentioning %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "wJalrSECRET") {
			t.Errorf("Open(%q) error shows the secret: %v", tc.url, err)
		}
	}
}

// TestURLTable: a missing table is a clear error naming it and the key
// schema; create_table creates it; a table with another key schema is
// refused; credentials never show in errors.
func TestURLTable(t *testing.T) {
	d := testserver.StartDynaliteProcess(t, nil)
	ctx := t.Context()
	base := "dynamodb://%s?region=us-east-1&endpoint=" + d.Endpoint()
	url := func(table, extra string) string { return strings.Replace(base, "%s", table, 1) + extra }

	var mux fencelock.URLMux
	mux.Register(dynamodb.Scheme, &dynamodb.URLOpener{Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrSECRET", "")})
	_, err := mux.Open(ctx, url("missing_table", ""), nil)
	if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), `"missing_table"`) ||
		!strings.Contains(err.Error(), `partition key "key" of type S`) || !strings.Contains(err.Error(), "create_table=true") {
		t.Fatalf("open on a missing table: %v; want ErrInvalid naming the table, the key schema and create_table", err)
	}
	if strings.Contains(err.Error(), "wJalrSECRET") || strings.Contains(err.Error(), "AKIDEXAMPLE") {
		t.Fatalf("error shows credentials: %v", err)
	}

	c, err := mux.Open(ctx, url("made_by_open", "&create_table=true"), nil)
	if err != nil {
		t.Fatalf("create_table=true: %v", err)
	}
	l, err := c.TryAcquire(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	dc := native(t, c)
	_ = c.Close()
	c2, err := mux.Open(ctx, url("made_by_open", ""), nil)
	if err != nil {
		t.Fatalf("reopening the created table without create_table: %v", err)
	}
	_ = c2.Close()

	_, err = dc.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            aws.String("wrong_schema"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mux.Open(ctx, url("wrong_schema", "&create_table=true"), nil)
	if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), "[id S HASH]") || !strings.Contains(err.Error(), `partition key "key"`) {
		t.Fatalf("open on a table keyed by id: %v; want ErrInvalid showing the schema found and the one needed", err)
	}
}

// TestCapabilities: what the backend declares, by URL.
func TestCapabilities(t *testing.T) {
	d := testserver.StartDynalite(t)
	caps := open(t, d.URL(), nil).Capabilities()
	if caps.Backend != "dynamodb" || caps.Fence != driver.FenceStrict || caps.TimeAuthority != driver.TimeClient ||
		caps.Wait != driver.WaitPoll || caps.MinTTL != 100*time.Millisecond || caps.FIFO {
		t.Errorf("capabilities %+v", caps)
	}
	mixed := open(t, d.URL()+"&mixed_fleet=true", nil).Capabilities()
	if mixed.Fence != driver.FenceTimeFloored {
		t.Errorf("mixed_fleet=true: fence guarantee %v, want time-floored", mixed.Fence)
	}
	var api dynamodb.API
	if !open(t, d.URL(), nil).As(&api) || api == nil {
		t.Error("As(*dynamodb.API) failed")
	}
}

// TestURLNoRegion: no region anywhere is ErrInvalid saying where to put it.
func TestURLNoRegion(t *testing.T) {
	for _, v := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	_, err := fencelock.Open(t.Context(), "dynamodb://locks?endpoint=http://127.0.0.1:1&dummy_credentials=true")
	if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), "region=") {
		t.Fatalf("Open without a region: %v, want ErrInvalid saying to add region=", err)
	}
}

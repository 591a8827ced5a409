package dynamodb_test

import (
	"errors"
	"testing"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/dynamodb"
)

// TestNewRejectsBadConfig: New reports a nil client or config, a missing
// or malformed table name and a negative poll interval as ErrInvalid,
// before any I/O; a good config gives a Client.
func TestNewRejectsBadConfig(t *testing.T) {
	client := ddb.New(ddb.Options{Region: "us-east-1"}) // New does no I/O
	for _, tc := range []struct {
		what   string
		client dynamodb.API
		cfg    *dynamodb.Config
	}{
		{"nil client", nil, &dynamodb.Config{Table: "locks"}},
		{"nil config", client, nil},
		{"no table", client, &dynamodb.Config{}},
		{"bad table name", client, &dynamodb.Config{Table: "a b"}},
		{"negative PollInterval", client, &dynamodb.Config{Table: "locks", PollInterval: -time.Second}},
	} {
		if c, err := dynamodb.New(tc.client, tc.cfg, nil); c != nil || !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("%s: %v, %v; want nil, ErrInvalid", tc.what, c, err)
		}
	}
	c, err := dynamodb.New(client, &dynamodb.Config{Table: "locks"}, nil)
	if err != nil {
		t.Fatalf("good config: %v", err)
	}
	_ = c.Close()
}

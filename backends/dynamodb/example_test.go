package dynamodb_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/dynamodb"
)

// A lease on a DynamoDB lock, with its fence sent along with the write it
// protects. (It needs DynamoDB, so it has no Output line: run it as a
// program with AWS credentials and a region configured.)
func Example() {
	ctx := context.Background()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	client := ddb.NewFromConfig(awsCfg)
	if err := dynamodb.CreateTable(ctx, client, "locks"); err != nil { // once; or create it with your IaC
		log.Fatal(err)
	}
	locks, err := dynamodb.New(client, &dynamodb.Config{Table: "locks", PollInterval: 100 * time.Millisecond}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	lease, err := locks.Acquire(ctx, "nightly-report", &fencelock.AcquireOptions{TTL: 20 * time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// Do the work under lease.Context(): it is cancelled if the lease is
	// lost. Send lease.Fence() with every write; the resource refuses a
	// write whose fence is lower than one it has seen (package guard).
	fmt.Println("writing with fence", lease.Fence())
}

// Opening by URL: the blank import registers dynamodb://.
func Example_open() {
	ctx := context.Background()
	url := os.Getenv("DYNAMODB_URL") // e.g. dynamodb://locks?region=eu-west-1, or a local
	// emulator: dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:8000&create_table=true&dummy_credentials=true
	if url == "" {
		url = "dynamodb://locks?region=us-east-1"
	}
	locks, err := fencelock.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	lease, err := locks.TryAcquire(ctx, "orders:42", nil)
	if err != nil {
		log.Fatal(err) // errors.Is(err, fencelock.ErrNotAcquired) when held
	}
	defer lease.Release(ctx)
	fmt.Println("fence", lease.Fence())
}

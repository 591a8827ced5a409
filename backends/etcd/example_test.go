package etcd_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/etcd"
)

// A lock whose fence guards a write to data kept in etcd itself.
func Example() {
	ctx := context.Background()
	endpoints := etcd.ExampleEndpoints() // a test server; yours: []string{"10.0.0.1:2379", ...}

	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	locks, err := etcd.New(cli, &etcd.Config{KeyPrefix: "locks/"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	lease, err := locks.Acquire(ctx, "nightly-report", &fencelock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// The put commits only while our lock key is still ours.
	if _, err := etcd.Guarded(ctx, locks, lease, clientv3.OpPut("reports/nightly", "done")); err != nil {
		log.Fatal(err)
	}
	// Elsewhere (a database, a file store), send the fence with each write.
	fmt.Println("fence is positive:", lease.Fence() > 0)
	// Output: fence is positive: true
}

// Opening by URL: the hosts are the cluster's endpoints and the path is the
// key prefix. The lock "job" is the key prefix "locks/job", the one
// `etcdctl lock locks/job` and concurrency.NewMutex(s, "locks/job") use.
func Example_open() {
	ctx := context.Background()
	url := "etcd://" + strings.Join(etcd.ExampleEndpoints(), ",") + "/locks" // e.g. etcd://10.0.0.1:2379,10.0.0.2:2379/locks

	locks, err := fencelock.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	lease, err := locks.TryAcquire(ctx, "job", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println(etcd.LockPrefix("locks/", lease.Name()))
	// Output: locks/job
}

// Lease.As gives the lease's ownership condition (a Guard) for etcd Txns,
// and Open by URL reads the cluster's shortest lease TTL: 1 s on this
// tuned test server, 2 s on a stock etcd.
func Example_guard() {
	ctx := context.Background()
	locks, err := fencelock.Open(ctx, "etcd://"+strings.Join(etcd.ExampleEndpoints(), ",")+"/locks")
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	fmt.Println("MinTTL:", locks.Capabilities().MinTTL)
	lease, err := locks.TryAcquire(ctx, "guarded", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	var g etcd.Guard
	if !lease.As(&g) {
		log.Fatal("not an etcd lease")
	}
	var cli *clientv3.Client
	locks.As(&cli)
	if _, err := g.Txn(ctx, cli, clientv3.OpPut("reports/guarded", "done")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("guard key under", etcd.LockPrefix("locks/", "guarded")+"/:", strings.HasPrefix(g.Key, "locks/guarded/"))
	fmt.Println("guard revision is the fence:", g.Rev == lease.Fence().Int64())
	// Output:
	// MinTTL: 1s
	// guard key under locks/guarded/: true
	// guard revision is the fence: true
}

package zookeeper_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/zookeeper"
)

// A lock on a ZooKeeper ensemble; the fence goes with every write to the
// protected resource.
func Example() {
	ctx := context.Background()
	servers := zookeeper.ExampleServers() // a test server; yours: []string{"10.0.0.1:2181", ...}

	locks, err := zookeeper.New(ctx, &zookeeper.Config{Servers: servers, Root: "/locks"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	lease, err := locks.Acquire(ctx, "nightly-report", &fencelock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// The fence is a zxid that grows with every grant: send it with each
	// write.
	fmt.Println("fence is positive:", lease.Fence() > 0)
	// Output: fence is positive: true
}

// Opening by URL: the hosts are the ensemble and the path is the root of
// the lock paths. The lock "job" is the node /locks/job, the path a
// go-zookeeper zk.NewLock(conn, "/locks/job", acl), a Curator
// InterProcessMutex(client, "/locks/job") or a kazoo Lock (with
// extra_lock_patterns=["-lock-"]) shares.
func Example_open() {
	ctx := context.Background()
	url := "zk://" + strings.Join(zookeeper.ExampleServers(), ",") + "/locks?session_timeout=10s" // e.g. zk://10.0.0.1:2181,10.0.0.2:2181/locks

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
	var node string
	lease.As(&node) // /locks/job/_c_<uuid>-lock-<seq>
	fmt.Println(zookeeper.LockPath("/locks", lease.Name()), strings.HasPrefix(node, "/locks/job/_c_"))
	// Output: /locks/job true
}

package etcd

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEnqueueReadsQueue: a blocking Acquire's Txn learns from its one
// read of the keys ahead (before its Put) whether its key is first, the
// key just ahead, whether that is the only one, and every key ahead while
// there are at most aheadMax.
func TestEnqueueReadsQueue(t *testing.T) {
	c := sharedEtcd(t, 1)
	cli := newClientv3(t, c.Endpoints()...)
	for _, n := range []int{0, 1, 2, aheadMax, aheadMax + 1, aheadMax + 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ctx := t.Context()
			b := newBackend(cli, &Config{KeyPrefix: fmt.Sprintf("enqueue-%d-%d/", n, time.Now().UnixNano())}, false)
			defer b.Close()
			pfx := b.keyPrefix + "job"
			var keys []string // created in this order: keys[0] is first
			for i := range n {
				k := fmt.Sprintf("%s/other_%02d", pfx, n-i) // names sort against creation order
				if _, err := cli.Put(ctx, k, ""); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
			defer cli.Delete(ctx, pfx+"/", clientv3.WithPrefix())
			ct, err := b.enqueue(ctx, "job", "", 15*time.Second, false, false)
			if err != nil {
				t.Fatal(err)
			}
			defer b.removeKey(ctx, ct)
			if ct.held != (n == 0) {
				t.Errorf("held = %v with %d keys ahead", ct.held, n)
			}
			wantPred := ""
			if n > 0 {
				wantPred = keys[n-1]
			}
			if ct.pred != wantPred {
				t.Errorf("pred = %q, want %q", ct.pred, wantPred)
			}
			if ct.only != (n == 1) {
				t.Errorf("only = %v with %d keys ahead", ct.only, n)
			}
			switch {
			case n == 0 || n > aheadMax:
				if ct.ahead != nil {
					t.Errorf("ahead = %q with %d keys ahead, want nil", ct.ahead, n)
				}
			default:
				if len(ct.ahead) != n {
					t.Fatalf("ahead = %q, want the %d keys ahead", ct.ahead, n)
				}
				for i, k := range ct.ahead { // last-created first
					if k != keys[n-1-i] {
						t.Errorf("ahead[%d] = %q, want %q", i, k, keys[n-1-i])
					}
				}
			}
			if ct.rev != ct.hdr || ct.rev == 0 {
				t.Errorf("rev %d, hdr %d: want the Txn's revision for both", ct.rev, ct.hdr)
			}
		})
	}
}

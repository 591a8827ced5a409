package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Renewal proof. A keepalive proves that the class lease lives, not that a
// lock key is still on it: the key may have been deleted (etcdctl del,
// Admin.Expire, our own reaper) and the lock granted to another client.
// The shared watch reports such a deletion, but it may lag (a busy
// machine, a burst of deletions under the prefix ahead of ours), so a
// renewal never trusts it. Each keepalive that renewals joined is sent
// together with one linearizable read of their keys (a read-only Txn of
// up to maxCheckOps OpGets, keys only: no raft write), started right
// after the keepalive and before waiting for its answer, so the two
// overlap. A renewal counts only if that read found its key with its
// CreateRevision (ours) on the class lease the keepalive restarted.
//
// Why that proves the renewal, whichever of the two the server handled
// first: both were sent after every joined renewal was called. The read
// found the key on the class lease L; the keepalive found L alive and
// restarted its TTL after it was sent. Keys on L go only when L ends
// (which the keepalive would have reported, had it happened before) or
// when someone deletes them; so unless someone deletes the key after the
// read (a later loss, which the watch reports), it lives until L's TTL,
// counted from the keepalive's send time at the earliest, runs out.

// maxCheckOps is the most keys one check Txn reads: etcd's default
// --max-txn-ops (128).
const maxCheckOps = 128

// keyState is what a check read found of a lock key.
type keyState uint8

const (
	keyOurs  keyState = iota // our CreateRevision, on the class lease checked
	keyGone                  // absent, or another CreateRevision: the lease is lost
	keyMoved                 // ours, but on another etcd lease (a move whose outcome was unknown)
)

// checkKeys reads the keys of ls (members of the class whose etcd lease is
// id) with linearizable read-only Txns of at most maxCheckOps reads each,
// and returns what it found of each, in the order of ls.
func (b *backend) checkKeys(ctx context.Context, id clientv3.LeaseID, ls []*lease) ([]keyState, error) {
	st := make([]keyState, len(ls))
	for lo := 0; lo < len(ls); lo += maxCheckOps {
		chunk := ls[lo:min(lo+maxCheckOps, len(ls))]
		ops := make([]clientv3.Op, len(chunk))
		for i, l := range chunk {
			ops[i] = clientv3.OpGet(l.key, clientv3.WithKeysOnly())
		}
		resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		for i, l := range chunk {
			var kvs = resp.Responses[i].GetResponseRange().GetKvs()
			switch {
			case len(kvs) == 0 || kvs[0].CreateRevision != l.rev:
				st[lo+i] = keyGone
			case clientv3.LeaseID(kvs[0].Lease) != id:
				st[lo+i] = keyMoved
			default:
				st[lo+i] = keyOurs
			}
		}
	}
	return st, nil
}

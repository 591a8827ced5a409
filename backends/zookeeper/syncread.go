package zookeeper

// synced runs read f after a sync of path on s's server. A ZooKeeper read
// is answered by the server the session is connected to, which may be a
// follower behind the leader: it sees this session's own writes, but not
// necessarily another client's committed ones. A sync first makes the
// server catch up with the leader as of the sync, so that the read that
// follows on the same session sees every write committed before the sync
// was sent (ZooKeeper Programmer's Guide, "Consistency Guarantees").
//
// Reads that decide about another client's write use it: Extend (was our
// node deleted by someone else?), Inspect and the admin's Expire (who
// holds now?). The acquire path does not: after our own create, the
// queue read sees every node created before ours, and a predecessor that
// is already gone only costs a watch that fires at once.
func synced[T any](s *session, path string, f func() (T, error)) func() (T, error) {
	return func() (T, error) {
		if _, err := s.conn.Sync(path); err != nil {
			var zero T
			return zero, err
		}
		return f()
	}
}

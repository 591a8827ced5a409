// Package zookeeper is the zk:// backend: ZooKeeper's standard lock recipe
// (ephemeral sequential nodes, the lowest holds, each waiter watches the
// one just ahead of it), in the node form Curator writes, with a Zab zxid
// as the fence.
//
//	import (
//		"github.com/go-zookeeper/zk"
//		"github.com/fencelock/fencelock/backends/zookeeper"
//	)
//
//	locks, err := zookeeper.New(ctx, zookeeper.Config{Servers: []string{"127.0.0.1:2181"}, Root: "/locks"}, nil)
//	// or: fencelock.Open(ctx, "zk://127.0.0.1:2181/locks")
//
// # Node layout and interoperability
//
// The lock whose store key is K (the lock name with Options.Prefix in
// front) is the node
//
//	P = Root + "/" + escape(K)
//
// (LockPath computes it) and every contender is a child of P. escape
// percent-encodes "%" and "/" (so "a" and "a/b" are sibling locks, not a
// lock and a child of it), the characters ZooKeeper refuses in a path and
// a leading "."; other names map to themselves, so the name "job" under
// zk://host/locks is /locks/job. P and the missing parts of Root are
// created as CONTAINER nodes, which ZooKeeper deletes once they are empty.
//
// Our contender node is EPHEMERAL_SEQUENTIAL and named in Curator's
// protected form
//
//	P/_c_<owner token as a 36-character UUID>-lock-<10-digit sequence>
//
// The contender with the lowest sequence number holds the lock. Every
// child whose name ends in "lock-", "__lock__" or "__rlock__" followed by
// the 10-digit sequence counts as a contender: Curator's InterProcessMutex
// (`_c_<uuid>-lock-<seq>`), go-zookeeper's zk.Lock (`_c_<hex32>-lock-<seq>`)
// and kazoo's Lock (`<hex32>__lock__<seq>`) or ReadLock. So a Curator
// InterProcessMutex or a go-zookeeper zk.NewLock on P and this backend
// exclude each other both ways. kazoo's Lock sees only its own "__lock__"
// nodes unless it is made with extra_lock_patterns=["-lock-"]: without
// that we respect kazoo, but kazoo does not respect us. Other children of
// P are ignored.
//
// A create that fails with a lost connection may still have created our
// node: the backend then finds it by its protected prefix (our owner
// token), as Curator does, instead of creating a second one; a create
// abandoned with its outcome unknown (ctx ended, request timeout) is
// cleaned up in the background (any node with our prefix is deleted).
//
// # Fences
//
// The fence is a zxid (ZooKeeper transaction ID, global to the ensemble):
// the pzxid of the lock path P (the zxid of the last create or delete of
// a child of P) in the Children read that found our node first. That read
// is the one the recipe needs anyway, so the fence costs no request of its
// own. It is at least our node's czxid (our node is a child of P in that
// read) and equals it when no other child of P was created or deleted
// since ours.
//
// It strictly grows with every grant on P (FenceStrict), across releases,
// session expiry, client crashes, server restarts and leader elections:
// ZooKeeper applies transactions in zxid order, and a read shows a prefix
// of that history. Let grant G1 read state S1 (its node N1 present and
// first) and another grant G2 read a later state S2 (N2 present and
// first; S1 and S2 differ, as one state has one first node). N1 is gone
// from S2: if it were still there, N2 would be ahead of it, so created
// before it under the same incarnation of P (sequence numbers grow with
// creation, and P cannot be deleted while N1 is in it), and then present
// and ahead of N1 in S1 already. So N1's delete (release, TTL, session
// expiry or an admin) lies between S1 and S2, and
//
//	fence(G1) = pzxid(S1) <= last zxid of S1 < zxid of N1's delete <= pzxid(S2) = fence(G2)
//
// because a child's delete sets the parent's pzxid to the delete's zxid
// and pzxid never decreases while P exists. If P (a container) is
// deleted once empty and created again, its new pzxid starts at its own
// creation zxid, above every earlier one. Stale reads (a follower behind
// the leader) order fences by the history the reads saw, which is the
// order in which ZooKeeper granted the locks. The per-parent sequence
// number is not used as a fence: it restarts when the container parent is
// made again.
//
// A read that decides about another client's write (Extend: is our node
// still there? Inspect, and the admin's Expire: who holds now?) is sent
// after a sync on the same session, so a follower that lags the leader
// answers it only once it has caught up: such a read sees every write
// committed before it was sent, as on a single server.
//
// # Sessions and TTLs
//
// A lease lives as long as its ephemeral node, which lives as long as the
// ZooKeeper session that created it. The leases of one Client share one
// session per TTL class: a lease with TTL t uses a session whose requested
// timeout is t (or Config.SessionTimeout, the session_timeout URL
// parameter, for every t up to it), so 10,000 leases with one TTL are one
// session and one heartbeat stream. The server grants a session timeout
// between its minSessionTimeout and maxSessionTimeout (2 and 20 tickTimes
// by default); the backend reads the granted one from the connect response.
// MinTTL is the server's minSessionTimeout, read when the backend is made.
// Sessions stay open (idle ones cost a ping every third of their timeout)
// until the Client is closed.
//
// The session keeps our node while the client process runs, so the TTL is
// also enforced by the client: a lease not renewed for its TTL has its
// node deleted by the backend (the lock then frees as a store-side TTL
// would free it). When the process dies or freezes, or is partitioned from
// the ensemble, the server expires the session one session timeout after
// it last heard from it and deletes the node. Lease.StoreTTL (GrantedTTL)
// is the longer of the two: how long others may wait for an abandoned
// lock.
//
// Renewal (Extend and auto-renew) is one read of our node: it proves that
// the session was alive when the read was sent (so the server keeps it at
// least a session timeout past that) and that the node still exists, owned
// by our session, with a czxid no greater than our fence (a node of the
// same path made after ours has a greater one). ErrLeaseLost otherwise.
//
// # Disconnects and session expiry (Curator's SUSPENDED and LOST)
//
// Curator tells lock holders SUSPENDED when the connection drops and LOST
// when the session expires, and leaves it to the application to stop
// work at SUSPENDED. Here:
//
//   - Session expiry (LOST) ends every lease of that session at once
//     (Lease.Done, through driver.LossNotifier), as does a new session
//     replacing it.
//   - A disconnect (SUSPENDED) does not end a lease by itself: go-zookeeper
//     reconnects, to another server if need be, and a session that comes
//     back within its timeout keeps its nodes. Meanwhile renewals fail, so
//     a lease whose connection does not come back ends at its local
//     validity deadline (TTL after its last successful renewal was sent,
//     minus the drift margin). That is before the server can expire the
//     session and grant the lock to someone else, because the session
//     timeout is at least the TTL: the same rule as every other backend.
//   - A lease whose TTL is longer than its session's granted timeout (an
//     Extend to a longer TTL, or a TTL above the server's
//     maxSessionTimeout) could outlive its session by its local deadline,
//     so it ends at the first disconnect of its session.
//
// # Requests
//
// An uncontended acquire is two requests in one round trip: the create of
// our node and the Children read of P, sent as soon as the create is
// written, without waiting for its answer (ZooKeeper serves a session's
// requests in order, so the read sees our node; a read that does not is
// made again). Release is one delete. That is go-zookeeper's zk.Lock's
// create, Children and delete, with the fence in the read's answer.
//
// # Waiting
//
// Acquire is a driver.Blocker: our node stays queued while we wait (FIFO),
// we watch only the node just ahead of ours (no herd), and re-read the
// queue after every event, with a poll every 2s as a fallback. A cancelled
// wait deletes our node, also when the cancel races the grant.
//
// # Admin
//
// driver.Admin (for the conformance suite, not handed out by Client.As): Expire deletes the holder's node;
// KillSessions closes each of the backend's sessions on the server from a
// second connection that presents the session's ID and password
// (Curator's KillSession), which deletes their nodes at once.
//
// # Errors
//
// go-zookeeper takes no context: each request is bounded by ctx and
// Config.RequestTimeout (default 5s). No answer in time, a lost
// connection or no server yields errors wrapping fencelock.ErrUnavailable;
// when the caller's ctx ends first the error matches the ctx error.
//
// # As
//
// Lease.As supports **zk.Conn (the session's connection) and *string (the
// path of our node). Client.As supports *[]string (the servers).
//
// # Labels and Inspect
//
// The label is our contender node's data, which is where Curator (the
// client's address) and kazoo (its identifier) put theirs, so kazoo's
// Lock.contenders() (made with extra_lock_patterns=["-lock-"]) would list
// our labels next to its own identifiers (not tested here). SetLabel
// sets the node's data. Inspect reads the lock node's children (the lowest
// contender holds, the others wait, whichever client made them) and the
// holder node's data; the fence (a pzxid of the holder's own read) and the
// remaining TTL (the holder's timer) are not in the store and are not
// reported.
package zookeeper

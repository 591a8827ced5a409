// Package zookeeper is the zk:// backend: ZooKeeper's standard lock recipe
// (ephemeral sequential nodes, the lowest holds, each waiter watches the
// one just ahead of it), in the node form Curator writes, with a Zab zxid
// as the fence.
//
// # Opening
//
// With the package imported (a blank import suffices), by URL:
//
//	locks, err := fencelock.Open(ctx, "zk://127.0.0.1:2181/locks")
//
// The URL is zk://host1:2181,host2:2181[/root]: the ensemble's client
// addresses (port 2181 by default; give the last host a port), and the path
// is Config.Root (default "/"). Query parameters, besides fencelock's own
// prefix, ttl and wait:
//
//	session_timeout=10s  Config.SessionTimeout (default 0: each TTL gets a session of that timeout)
//	request_timeout=5s   Config.RequestTimeout (default 5s)
//
// Credentials (digest auth, ACLs) and a dialer go in URLOpener.Config, not
// in the URL. In Go, New takes a [Config] with the servers and Root; it
// connects once to read the servers' minimum session timeout, which
// becomes the minimum TTL (MinTTL in Capabilities).
//
// # Fences and sessions
//
// The fence is a zxid: the pzxid of the lock node in the read that found
// our node first. It is strict ([driver.FenceStrict]): it grows with every
// grant of the name across releases, session expiry, client crashes,
// server restarts and leader elections. A lease lives as long as its
// ephemeral node, hence its session; a Client's leases with one TTL share
// one session. Renewal is one read of our node. A lease not renewed for
// its TTL has its node deleted by the backend; a dead, frozen or
// partitioned client's node goes when the server expires its session, one
// session timeout after it last heard from it ([fencelock.Lease.StoreTTL]
// reports the longer of the two). Session expiry ends every lease of the
// session at once; a disconnect does not (go-zookeeper reconnects), but
// renewals fail meanwhile, so the lease ends at its local deadline, before
// the server can expire the session. A lease whose TTL is longer than its
// session's granted timeout ends at the first disconnect of its session.
// Blocked Acquires queue in node order (FIFO).
//
// # Interop with Curator, kazoo and go-zookeeper
//
// The lock for name K (after [fencelock.Options].Prefix) is the node
// Root/escape(K) ([LockPath]; "%", "/", characters ZooKeeper refuses and a
// leading "." are percent-encoded, so "job" under zk://host/locks is
// /locks/job), created as a CONTAINER node. Our contender is an
// EPHEMERAL_SEQUENTIAL child in Curator's protected form
// _c_<uuid>-lock-<10-digit sequence>. Children ending in "lock-",
// "__lock__" or "__rlock__" plus a sequence count as contenders, so a
// Curator InterProcessMutex or a go-zookeeper zk.Lock on that path and
// fencelock exclude each other both ways. kazoo's Lock sees only its own
// "__lock__" nodes unless made with extra_lock_patterns=["-lock-"]: without
// it fencelock respects kazoo, but kazoo does not respect fencelock.
//
// # Inspect
//
// The label is our contender node's data (where Curator and kazoo keep
// theirs); SetLabel sets it. [fencelock.Client.Inspect] reports the lowest
// contender's label and the number of other contenders, whichever client
// made them; the fence and the remaining TTL are not in the store and are
// not reported.
//
// # As
//
// [fencelock.Lease.As] supports **zk.Conn (the session's connection) and
// *string (the path of our node). [fencelock.Client.As] supports *[]string
// (the servers).
//
// # Errors
//
// Each request is bounded by ctx and Config.RequestTimeout. No answer in
// time, a lost connection or no server yields errors wrapping
// [fencelock.ErrUnavailable]; when the caller's ctx ends first the error
// matches the ctx error.
package zookeeper

// Package etcd is the etcd:// backend: locks that follow etcd's own
// concurrency.Mutex protocol, with a fence taken from the cluster revision.
//
// # Opening
//
// With the package imported (a blank import suffices), by URL:
//
//	locks, err := fencelock.Open(ctx, "etcd://127.0.0.1:2379/locks")
//
// The URL is etcd://[user:password@]host1:2379,host2:2379[/key/prefix]:
// the cluster's client endpoints (port 2379 by default; give the last host
// a port), and the path, if any, plus "/" is Config.KeyPrefix (default
// empty). Query parameters, besides fencelock's own prefix, ttl and wait:
//
//	request_timeout=5s  Config.RequestTimeout (default 5s)
//
// Opening by URL asks the cluster for its shortest lease TTL
// ([ProbeMinTTL]) and fails with [fencelock.ErrUnavailable] if it does not
// answer. For TLS or other client settings register a URLOpener with them
// under another scheme, or use New, which takes a
// clientv3.Client (not closed by the Client) and a [Config]; with New the
// minimum TTL is Config.MinTTL (default 1 s).
//
// # Fences and leases
//
// The fence is the CreateRevision of our lock key: a cluster-wide raft
// revision, so every later holder of the name has a greater one, across
// releases, expiry, client crashes, member restarts and leader elections
// ([driver.FenceStrict]). [Guard] turns a lease into an etcd Txn comparison
// for data kept in etcd itself.
//
// A Client keeps one etcd lease per TTL class (the TTL rounded up to whole
// seconds) and attaches the key of every lock with that TTL to it. etcd
// raises a TTL below 1.5 × its election timeout: 2 s on a stock server,
// so shorter TTLs are rejected with [fencelock.ErrInvalid] rather than
// silently raised; [fencelock.Lease.StoreTTL] reports what etcd granted. A
// lock that is not renewed still ends in the store after its TTL; if the
// Client dies, its etcd leases expire and their keys go. Blocked Acquires
// queue in revision order (FIFO) and each watches the key just ahead. A
// deletion of a held key that is not our Release (expiry, revocation,
// etcdctl del) ends the lease as soon as the Client's watch delivers it.
//
// # Interop with etcdctl and concurrency.Mutex
//
// A lock on name K (after [fencelock.Options].Prefix) is the set of keys
// under P = KeyPrefix + escape(K) ([LockPrefix]; escape turns "%" into
// "%25" and "/" into "%2F"), one per contender: P + "/" + the etcd lease
// ID in hex + "_" + a hex number, attached to that lease, with the lease's
// label as its value. The lowest CreateRevision holds: exactly
// concurrency.Mutex and `etcdctl lock`, so a Mutex made with
// concurrency.NewMutex(session, LockPrefix(prefix, K)), or `etcdctl lock
// P`, and fencelock exclude each other. Names without "/" or "%" map to
// themselves: `etcdctl lock locks/job` and the name "job" under
// etcd://host/locks share a lock. The value is where concurrency.Election
// keeps a leader's value, so an Election on the same prefix reports our
// holder's label.
//
// # Inspect
//
// [fencelock.Client.Inspect] is one read of the lock prefix and one
// TimeToLive: the first-created key's label, its CreateRevision as the
// fence, the number of other keys as waiters, and the holder's etcd lease's
// remaining time (whole seconds, rounded up). SetLabel rewrites the value
// in place.
//
// # As
//
// [fencelock.Client.As] supports **clientv3.Client: clients made by New
// share the caller's etcd client; clients opened by URL own theirs.
// [fencelock.Lease.As] supports *[Guard] ([GuardOf] is a helper over it)
// and *clientv3.LeaseID, while the lease is held.
//
// # Errors
//
// A cluster that does not answer within Config.RequestTimeout yields
// errors wrapping [fencelock.ErrUnavailable]; when the caller's ctx ends
// first the error matches the ctx error (and ErrUnavailable too if no
// endpoint was connected).
package etcd

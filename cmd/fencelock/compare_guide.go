package main

// guideText is the decision guide at the top of docs/comparison.md. Its
// claims are the backends' declared guarantees (checked by the
// conformance suite) and what the tables below measure; keep it true when
// they change.
const guideText = `## Which one to pick

**The fence, not the lock, protects the data.** Every lock here is a lease with a timer, and a holder that pauses past its TTL (GC, a frozen VM, a call with no timeout) keeps working after someone else got the lock; only a resource that refuses writes carrying an older fence (package ` + "`guard`" + `, claiming the row with the fence *before* reading it) turns that into a rejected write instead of a lost update — on every backend, as the last table shows.

- **Redis** when you already run one Redis and want the fastest hand-off and contention behaviour: a few hundred µs per hand-off, fair under contention (waiters are served in arrival order; when the work under the lock is nearly nothing, that costs raw throughput against redislock, whose releaser takes the lock straight back: every grant goes to another client, see Next to the peers). Its fence is *time-floored*: strictly increasing while the server keeps its data, and after a restart that lost the counter (no persistence) or a failover to a replica that missed the last writes, it still increases unless the server clock went back by more than the outage lasted. The lock itself does not survive losing the node (a replica promoted by Sentinel may not have it): pair it with the fence, not with hope.
- **Redlock** (N independent Redis primaries) when the lock must stay available while a minority of Redis nodes is down, and you have no consensus store. It costs a round trip to every primary (several times Redis) and its fence is time-floored too; it is not a consensus protocol, so a paused holder or a clock jump can still overlap two holders — the fence is what makes that harmless.
- **etcd** or **ZooKeeper** when you need the lock and its fence to survive node loss with a strict guarantee (Raft revision / Zab zxid: strictly increasing across leader failover) and you run one of them already (Kubernetes brings etcd). Both queue waiters FIFO in the server. Their minimum TTL is a second or more (etcd's minimum lease, ZooKeeper's session timeout), so a crashed holder blocks others for that long; acquire and hand-off cost milliseconds (a quorum write, fsynced).
- **Postgres** when the data you protect lives in Postgres: the advisory lock lives in a transaction on the same server, the fence is the transaction id (strict, made crash-durable before the grant returns), and the guard's claim can go in the same database. Each held lease holds a connection (size the pool for your held locks plus waiters); the strict fence costs one flushed commit per grant (` + "`fence_flush=false`" + ` removes it and declares the fence time-floored).
- **DynamoDB** when you are on AWS without a server of your own to run: conditional writes, the fence is a number in the lock item (strict; time-floored with ` + "`mixed_fleet=true`" + `). There is no server-side wait: waiters poll (adaptively, from 5 ms), queued in arrival order in the lock item, so nobody starves, but each hand-off costs a poll and contended throughput is low (see the table below) — use it for coarse locks held for a while.
- **mem** in tests and single-process programs.

`

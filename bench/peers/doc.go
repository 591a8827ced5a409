// Package peers measures fencelock next to the peer lock libraries on the
// same real servers in the same run: bsm/redislock and
// go-redsync/redsync on Redis (and redsync's Redlock on five primaries),
// etcd's concurrency.Mutex, raw pgx advisory transaction locks, go-zookeeper's
// zk.Lock and the AWS DynamoDB Lock Client's protocol on aws-sdk-go-v2,
// each behind the small Lock interface, plus each store's floor (PING, a
// flushed Postgres commit, an etcd Put, a ZooKeeper Exists).
//
// Start starts the servers as in production (fsync on; stock etcd with
// default timing), Run measures in interleaved rounds (and within a round
// the uncontended and hand-off measures of one store's implementations in
// turns of a few milliseconds, their contention in turns of a second), and
// the result is a Result (JSON, schema in its doc comment) and a Markdown table. The
// program is bench/cmd/benchpeers (`make bench-peers`). It lives in the
// nested bench module so the library's go.mod never requires a peer.
//
// The contention measure also records the CPU time each grant cost, in
// this process (every client) and in the server processes (Linux). On a
// small machine the clients and the server share the cores, so that cost
// bounds contended throughput (cores ÷ CPU per grant). Two benchmarks
// break Redis down further: BenchmarkRedisCycle (an uncontended cycle's
// wall, client and server time, interleaved with redislock's) and
// BenchmarkRedisRing (a token passed around 8 clients through the server:
// what a fair, server-mediated hand-off costs with no lock logic at all).
package peers

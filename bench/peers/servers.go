package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// Stores lists the store kinds, in the brief's priority order (a new
// slice each call).
func Stores() []string {
	return []string{"redis", "etcd", "postgres", "zookeeper", "redlock5", "dynamodb"}
}

// Env is the started servers and the implementations and floors on them.
type Env struct {
	Impls   []Impl
	Floors  []Floor
	Servers map[string]string // store → server version and settings

	cleanups []func()
}

// Close stops every server Start started. A nil Env is a no-op.
func (e *Env) Close() {
	if e == nil {
		return
	}
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
}

// Start starts a server for each of stores (nil: all of Stores), as in
// production: Postgres with fsync and full_page_writes on, the stock etcd
// binary with its default timing and fsync, one redis-server (defaults),
// five redis-servers for Redlock, one ZooKeeper, dynalite. On error the
// servers already started are stopped.
func Start(ctx context.Context, stores []string) (*Env, error) {
	if stores == nil {
		stores = Stores()
	}
	env := &Env{Servers: map[string]string{}}
	if err := env.startAll(ctx, stores); err != nil {
		return nil, err
	}
	return env, nil
}

// startAll starts each of stores in turn; on the first error it stops
// every server already started and returns that error.
func (e *Env) startAll(ctx context.Context, stores []string) error {
	for _, s := range stores {
		if err := e.start(ctx, s); err != nil {
			e.Close()
			return fmt.Errorf("peers: start %s: %w", s, err)
		}
	}
	return nil
}

// start starts store's server(s) and adds their implementations and
// floors to e.
func (e *Env) start(ctx context.Context, store string) error {
	switch store {
	case "redis":
		return e.startRedis(ctx, store)
	case "redlock5":
		return e.startRedlock(ctx, store)
	case "etcd":
		return e.startEtcd(ctx, store)
	case "postgres":
		return e.startPostgres(ctx, store)
	case "zookeeper":
		return e.startZooKeeper(ctx, store)
	case "dynamodb":
		return e.startDynamoDB(ctx, store)
	default:
		return fmt.Errorf("unknown store %q (want one of %s)", store, strings.Join(Stores(), ", "))
	}
}

// startRedis starts one redis-server (defaults).
func (e *Env) startRedis(ctx context.Context, store string) error {
	r, stop, err := testserver.NewRedis(ctx)
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, stop)
	e.Servers[store] = redisVersion(ctx, r.Addr())
	e.Impls = append(e.Impls,
		fencelockImpl("redis/fencelock", store, r.URL(), fencelockNotes+"; its go-redis client speaks RESP2 (the URL default; the peers keep go-redis's RESP3)"),
		redislockImpl(r.Addr()),
		redsyncImpl("redis/redsync", store, []string{r.Addr()}))
	e.Floors = append(e.Floors, pingFloor(r.Addr()))
	e.serve(store, r.Proc)
	return nil
}

// startRedlock starts five redis-servers, for Redlock.
func (e *Env) startRedlock(ctx context.Context, store string) error {
	m, stop, err := testserver.NewRedisNodes(ctx, 5, nil)
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, stop)
	e.Servers[store] = "5 × " + redisVersion(ctx, m.Addrs()[0])
	e.Impls = append(e.Impls,
		fencelockImpl("redlock5/fencelock", store, m.URL(), fencelockNotes+"; its go-redis clients speak RESP2 (the URL default; the peers keep go-redis's RESP3)"),
		redsyncImpl("redlock5/redsync", store, m.Addrs()))
	var procs []*testserver.Proc
	for _, n := range m.Nodes {
		procs = append(procs, n.Proc)
	}
	e.serve(store, procs...)
	return nil
}

// startEtcd starts the stock etcd binary with its default timing and fsync.
func (e *Env) startEtcd(ctx context.Context, store string) error {
	dir, err := os.MkdirTemp("", "fencelock-peers-etcd-")
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, func() { _ = os.RemoveAll(dir) })
	s, err := testserver.NewStockEtcd(ctx, dir)
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, func() { _ = s.Kill() })
	e.Servers[store] = etcdVersion(ctx, s.Endpoint) + " (stock binary, default timing, fsync on)"
	e.Impls = append(e.Impls,
		fencelockImpl("etcd/fencelock", store, s.URL("peers-fencelock"), fencelockNotes),
		etcdMutexImpl(s.Endpoint))
	e.Floors = append(e.Floors, etcdPutFloor(s.Endpoint))
	e.serve(store, s.Proc)
	return nil
}

// startPostgres starts Postgres with fsync and full_page_writes on.
func (e *Env) startPostgres(ctx context.Context, store string) error {
	// Later -c settings override NewPostgres's fsync=off and
	// full_page_writes=off.
	p, err := testserver.NewPostgres(ctx, "-c", "fsync=on", "-c", "full_page_writes=on", "-c", "synchronous_commit=on")
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, p.Cleanup)
	v, err := postgresSettings(ctx, p.URL())
	if err != nil {
		return err
	}
	e.Servers[store] = v
	e.Impls = append(e.Impls,
		fencelockImpl("postgres/fencelock-strict", store, p.URL(), fencelockNotes+"; strict fence (default: one flushed commit per grant)"),
		fencelockImpl("postgres/fencelock-noflush", store, testserver.PostgresDSNWith(p.URL(), "fence_flush", "false"), fencelockNotes+"; fence_flush=false"),
		pgRawImpl(p.URL()))
	e.Floors = append(e.Floors, pgCommitFloor(p.URL()))
	e.serve(store, p.Proc)
	return nil
}

// startZooKeeper starts one ZooKeeper server.
func (e *Env) startZooKeeper(ctx context.Context, store string) error {
	z, err := testserver.NewZooKeeper(ctx, 1)
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, z.Cleanup)
	e.Servers[store] = zkVersion(ctx, z.Servers()[0])
	e.Impls = append(e.Impls,
		fencelockImpl("zookeeper/fencelock", store, z.URL(), fencelockNotes),
		zkLockImpl(z.Servers()))
	e.Floors = append(e.Floors, zkExistsFloor(z.Servers()))
	e.serve(store, z.Nodes[0].Proc)
	return nil
}

// startDynamoDB starts dynalite, with the table both implementations use.
func (e *Env) startDynamoDB(ctx context.Context, store string) error {
	d, stop, err := testserver.NewDynalite(ctx)
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, stop)
	// Opening by the server's URL creates the table both use.
	c, err := fencelock.Open(ctx, d.URL())
	if err != nil {
		return err
	}
	_ = c.Close()
	e.Servers[store] = "dynalite (in memory, node.js)"
	e.Impls = append(e.Impls,
		fencelockImpl("dynamodb/fencelock", store, d.URL(), fencelockNotes),
		dynamoBaselineImpl(d.Endpoint(), testserver.DynaliteTable))
	e.serve(store, d.Proc)
	return nil
}

// serve records procs as the server processes of store's
// implementations (see Impl.Server).
func (e *Env) serve(store string, procs ...*testserver.Proc) {
	pids := func() []int {
		var out []int
		for _, p := range procs {
			if p != nil {
				if pid := p.PID(); pid != 0 {
					out = append(out, pid)
				}
			}
		}
		return out
	}
	for i := range e.Impls {
		if e.Impls[i].Store == store {
			e.Impls[i].Server = pids
		}
	}
}

func redisVersion(ctx context.Context, addr string) string {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "redis (version unknown: " + err.Error() + ")"
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "redis " + v
		}
	}
	return "redis (version unknown)"
}

func etcdVersion(ctx context.Context, endpoint string) string {
	c, err := newEtcdClient(endpoint)
	if err != nil {
		return "etcd (version unknown)"
	}
	defer c.Close()
	st, err := c.Status(ctx, endpoint)
	if err != nil {
		return "etcd (version unknown)"
	}
	return "etcd " + st.Version
}

// postgresSettings returns the version and the durability settings, and
// an error unless fsync is really on.
func postgresSettings(ctx context.Context, dsn string) (string, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	var v, fsync, fpw, sc string
	err = c.QueryRow(ctx, "select current_setting('server_version'), current_setting('fsync'), current_setting('full_page_writes'), current_setting('synchronous_commit')").Scan(&v, &fsync, &fpw, &sc)
	if err != nil {
		return "", err
	}
	if fsync != "on" {
		return "", errors.New("postgres: fsync is " + fsync + ", want on")
	}
	return fmt.Sprintf("postgres %s (fsync=%s, full_page_writes=%s, synchronous_commit=%s)", v, fsync, fpw, sc), nil
}

func zkVersion(ctx context.Context, addr string) string {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return "zookeeper (version unknown)"
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.WriteString(c, "srvr")
	b, _ := io.ReadAll(c)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Zookeeper version:"); ok {
			v, _, _ = strings.Cut(strings.TrimSpace(v), ",")
			v, _, _ = strings.Cut(v, "-${") // an unfilled build placeholder
			return "zookeeper " + v
		}
	}
	return "zookeeper (version unknown)"
}

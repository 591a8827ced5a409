package zookeeper

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// DefaultRequestTimeout bounds each ZooKeeper request when
// Config.RequestTimeout is 0.
const DefaultRequestTimeout = 5 * time.Second

// Auth is one set of credentials added to every session (zk.Conn.AddAuth).
type Auth struct {
	// Scheme is the ZooKeeper auth scheme, e.g. "digest".
	Scheme string
	// Credential is the scheme's credential, e.g. "user:password" for
	// digest.
	Credential string
}

// Config configures the ZooKeeper backend. The zero value gives the
// defaults; only Servers is required.
type Config struct {
	// Servers are the ensemble's client addresses, host:port.
	Servers []string
	// Root is the path under which lock paths are made, e.g. "/locks".
	// Default: "/" (lock paths are top-level nodes).
	Root string
	// SessionTimeout, if set, is the session timeout shared by every lease
	// whose TTL is at most it (one session for all of them); a lease with
	// a longer TTL gets a session of its own TTL. Default: 0, every TTL
	// gets a session whose timeout is that TTL.
	SessionTimeout time.Duration
	// RequestTimeout bounds each request; past it the ensemble counts as
	// unavailable. Default: DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Digest, if set ("user:password"), authenticates every session with
	// the digest scheme, and nodes are created with ACL (default: all
	// permissions for that user only, zk.DigestACL).
	Digest string
	// Auth are more credentials added to every session.
	Auth []Auth
	// ACL is the ACL of created nodes. Default: zk.WorldACL(zk.PermAll), or
	// the digest user's with Digest.
	ACL []zk.ACL
	// Dialer dials the servers. Default: net.DialTimeout.
	Dialer func(network, addr string, timeout time.Duration) (net.Conn, error)
	// Logger receives go-zookeeper's connection messages. Default: discard.
	Logger *slog.Logger
}

// capabilities are those of the zk:// backend. MinTTL is the server's
// minSessionTimeout, read when the backend is made.
var capabilities = driver.Capabilities{
	Backend:     "zookeeper",
	Fence:       driver.FenceStrict,
	FenceSource: "pzxid of the lock path when our node is first (Zab zxid)",
	// A lease lives on its session's heartbeats: an Extend past the
	// session timeout does not outlive a frozen holder's session.
	ExtendHoldBound: true,
	TTLGranularity:  time.Millisecond,
	TimeAuthority:   driver.TimeServer,
	Wait:            driver.WaitQueue,
	FIFO:            true,
	NodeLoss:        driver.NodeLossQuorum,
	// A release deletes the holder's node; the next contender's watch on
	// it fires and its read finds itself first: one event and one round
	// trip. (ExpiryWake is set from the server's minimum session timeout
	// when the backend is made.)
	ReleaseWake: 100 * time.Millisecond,
	// The label is the contender node's data, as Curator (the client's
	// address) and kazoo (its identifier) use it; the lowest contender
	// holds, the others wait. The fence (a pzxid of a read) and the
	// remaining TTL (the holder's own timer) are not in the store.
	Inspect: driver.InspectCaps{
		Supported: true, Label: true, Waiters: true, Relabel: true,
		LabelWhere: "the data of the holder's contender node, as Curator's (its address) and kazoo's (its identifier)",
	},
}

// New returns a Client whose locks are ZooKeeper nodes on cfg.Servers. It
// connects once to read the servers' minimum session timeout (the
// Capabilities' MinTTL) and fails with ErrUnavailable if no server
// answers within the request timeout. opts may be nil; cfg may not, as
// Servers has no default: a nil cfg or one without Servers is an error
// matching fencelock.ErrInvalid.
//
// Unlike the other backends' New, this one takes no client of the store's
// own (a *zk.Conn) and takes ctx first, because it dials itself: a
// ZooKeeper session's timeout is fixed when it connects, and each lease's
// TTL is its session's timeout, so the backend opens one session per TTL
// (Config.SessionTimeout aside) and must watch each session's events to
// see it expire. One caller's *zk.Conn and its event channel could serve
// only the one TTL it was dialled with. ctx bounds the first connection.
func New(ctx context.Context, cfg *Config, opts *fencelock.Options) (*fencelock.Client, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	b, err := newBackend(ctx, *cfg)
	if err != nil {
		return nil, &fencelock.Error{Op: "open", Backend: capabilities.Backend, Err: err}
	}
	return fencelock.New(b, opts), nil
}

var (
	_ driver.Backend = (*backend)(nil)
	_ driver.Blocker = (*backend)(nil)
	_ driver.Admin   = (*backend)(nil)
	_ driver.Aser    = (*backend)(nil)
)

type backend struct {
	servers        []string
	root           string
	sessionTimeout time.Duration
	timeout        time.Duration
	acl            []zk.ACL
	auth           []Auth
	dial           func(network, addr string, timeout time.Duration) (net.Conn, error)
	logger         zk.Logger
	caps           driver.Capabilities

	ctx    context.Context // cancelled by Close: ends waits and background deletes
	cancel context.CancelFunc
	ops    sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	sessions map[time.Duration]*session
}

func newBackend(ctx context.Context, cfg Config) (*backend, error) {
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("%w: zookeeper: no servers: want Config.Servers or zk://host1:2181,host2:2181/root", driver.ErrInvalid)
	}
	if cfg.SessionTimeout < 0 || cfg.RequestTimeout < 0 {
		return nil, fmt.Errorf("%w: zookeeper: negative Config.SessionTimeout or Config.RequestTimeout", driver.ErrInvalid)
	}
	b := &backend{
		servers:        slices.Clone(cfg.Servers),
		root:           "/" + trimSlashes(cfg.Root),
		sessionTimeout: cfg.SessionTimeout,
		timeout:        cfg.RequestTimeout,
		acl:            cfg.ACL,
		auth:           slices.Clone(cfg.Auth),
		dial:           cfg.Dialer,
		logger:         discard{},
		caps:           capabilities,
		sessions:       map[time.Duration]*session{},
	}
	if b.timeout <= 0 {
		b.timeout = DefaultRequestTimeout
	}
	if b.dial == nil {
		b.dial = net.DialTimeout
	}
	if cfg.Logger != nil {
		b.logger = slogger{cfg.Logger}
	}
	if cfg.Digest != "" {
		b.auth = append([]Auth{{Scheme: "digest", Credential: cfg.Digest}}, b.auth...)
		if b.acl == nil {
			user, pass, _ := cutColon(cfg.Digest)
			b.acl = zk.DigestACL(zk.PermAll, user, pass)
		}
	}
	if b.acl == nil {
		b.acl = zk.WorldACL(zk.PermAll)
	}
	pctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	min, err := probeMinTimeout(pctx, b.servers)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("zookeeper: read the minimum session timeout: %w (%v)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("%w: zookeeper: no server of %v answered: %v", driver.ErrUnavailable, b.servers, err)
	}
	b.caps.MinTTL = min
	// A session the server stops hearing from expires in the tick after
	// its timeout (ZooKeeper's expiry buckets are one tickTime wide, and
	// the minimum session timeout is two ticks unless configured
	// otherwise); its waiters are then woken by a watch.
	b.caps.ExpiryWake = min/2 + 200*time.Millisecond
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

func (b *backend) Capabilities() driver.Capabilities { return b.caps }

// As supports *[]string (the servers). A session's *zk.Conn is reached
// with Lease.As.
func (b *backend) As(target any) bool {
	switch p := target.(type) {
	case *[]string:
		*p = slices.Clone(b.servers)
	default:
		return false
	}
	return true
}

// Close ends waits, closes every session (the server then deletes their
// nodes at once) and waits for the requests in flight to end.
func (b *backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	sessions := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	b.mu.Unlock()
	b.cancel()
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Go(s.conn.Close) // fails the requests in flight at once
	}
	wg.Wait()
	b.ops.Wait()
	return nil
}

// begin registers an operation that Close waits for.
func (b *backend) begin() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.ErrClosed
	}
	b.ops.Add(1)
	return nil
}

func trimSlashes(s string) string {
	for len(s) > 0 && s[0] == '/' {
		s = s[1:]
	}
	for len(s) > 0 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}

func cutColon(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

type discard struct{}

func (discard) Printf(string, ...any) {}

type slogger struct{ l *slog.Logger }

func (s slogger) Printf(f string, a ...any) { s.l.Debug("zookeeper: " + fmt.Sprintf(f, a...)) }

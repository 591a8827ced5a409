package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jackc/pgx/v5/pgconn"
)

// Postgres is one PostgreSQL server: a child process started by
// StartPostgres or StartPostgresProcess, or an existing server named by
// POSTGRES_URL (then Proc is nil and there are no fault controls).
type Postgres struct {
	// Proc is the postmaster (Kill, Pause, Resume, Stop, Restart, ...), or
	// nil for an existing server. Signals go to its process group, which
	// holds every backend, so Pause freezes the whole server.
	Proc *Proc
	// Port is the TCP port on 127.0.0.1 (0 for an existing server).
	Port int
	// Dir is the server's directory: data/ (PGDATA), sock/ (Unix socket)
	// and initdb.log. Owned by the postgres user.
	Dir string

	url string
}

// PostgresURLEnv names the environment variable that points StartPostgres
// at an existing server instead of starting one, e.g.
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. The role
// must be allowed to call pg_terminate_backend on the test's sessions
// (a superuser, or a member of pg_signal_backend).
const PostgresURLEnv = "POSTGRES_URL"

// PostgresBinDir is where Debian's postgresql-15 package puts initdb and
// postgres.
const PostgresBinDir = "/usr/lib/postgresql/15/bin"

// URL returns a postgres:// URL (pgx DSN) for the server: superuser
// postgres, database postgres, sslmode=disable; or POSTGRES_URL.
func (p *Postgres) URL() string { return p.url }

// StartPostgres returns a running PostgreSQL for tb: the server named by
// POSTGRES_URL if set, else a new child process (see StartPostgresProcess),
// stopped when tb ends. A missing server binary skips tb (fails it under
// CI=true).
func StartPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	if u := os.Getenv(PostgresURLEnv); u != "" {
		return &Postgres{url: u}
	}
	return StartPostgresProcess(tb)
}

// StartPostgresProcess is StartPostgres without the POSTGRES_URL escape: it
// always starts a child process, for fault tests that kill, pause or
// restart the server. It is killed and its directory removed when tb ends.
func StartPostgresProcess(tb testing.TB, extraArgs ...string) *Postgres {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := NewPostgres(ctx, extraArgs...)
	if errors.Is(err, ErrMissing) {
		Unavailable(tb, "PostgreSQL 15", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Cleanup)
	return p
}

// NewPostgres starts PostgreSQL 15 without package testing (TestMain, the
// CLI): initdb and postgres run as the postgres user (the server refuses
// root) in a new directory under os.TempDir() that user owns, on a free
// 127.0.0.1 port with fsync off, its Unix socket in Dir/sock, and
// max_connections=300 (each held lease and each waiter holds a
// connection). extraArgs are more postgres arguments ("-c", "name=value").
// The caller calls Cleanup. An error wrapping ErrMissing means the binaries
// are not installed.
func NewPostgres(ctx context.Context, extraArgs ...string) (*Postgres, error) {
	initdb, err := LookPath("initdb", filepath.Join(PostgresBinDir, "initdb"))
	if err != nil {
		return nil, err
	}
	server, err := LookPath("postgres", filepath.Join(PostgresBinDir, "postgres"))
	if err != nil {
		return nil, err
	}
	cred, err := postgresCred()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencelock-pg-*")
	if err != nil {
		return nil, fmt.Errorf("testserver: postgres dir: %w", err)
	}
	p := &Postgres{Dir: dir}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return nil, fmt.Errorf("testserver: postgres dir: %w", err)
	}
	if cred != nil {
		for _, d := range []string{dir, sock} {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("testserver: chown %s to postgres: %w", d, err)
			}
		}
	}
	cmd := exec.CommandContext(ctx, initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.SysProcAttr = procAttr(cred, false)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testserver: initdb: %w\n%s", err, out)
	}
	var lastErr error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		p.Port = port
		p.url = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", Addr(port))
		args := []string{
			"-D", data, "-p", strconv.Itoa(port), "-k", sock,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off", "-c", "full_page_writes=off",
			"-c", "max_connections=300",
			"-c", "shared_buffers=32MB",
		}
		p.Proc = &Proc{
			Name:  "postgres " + Addr(port),
			Path:  server,
			Args:  append(args, extraArgs...),
			Dir:   dir,
			Cred:  cred,
			Ready: func(ctx context.Context) error { return postgresPing(ctx, p.url) },
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		lastErr = p.Proc.Start(sctx)
		cancel()
		if lastErr == nil {
			ok = true
			return p, nil
		}
		_ = p.Proc.Kill()
	}
	return nil, lastErr
}

// Cleanup kills a child server and removes its directory; nothing for an
// existing server.
func (p *Postgres) Cleanup() {
	if p.Proc == nil {
		return
	}
	_ = p.Proc.Kill()
	_ = os.RemoveAll(p.Dir)
}

// ErrNoFaultControls: the server is an existing one (POSTGRES_URL), not a
// child process, so it cannot be killed, paused or restarted.
var ErrNoFaultControls = errors.New("testserver: existing server (" + PostgresURLEnv + "): no fault controls; unset it to run fault tests")

// PostgreSQL's child processes (backends, checkpointer, ...) each run in a
// session of their own, so Proc's process-group signals reach only the
// postmaster. The methods below signal the children too.

// Kill ends the server with SIGKILL to the postmaster and every child (a
// crash: recovery runs at the next Start).
func (p *Postgres) Kill() error {
	return p.do(func(c *Proc) error {
		signalChildren(c.PID(), sigKill)
		return c.Kill()
	})
}

// Stop shuts the server down cleanly with a fast shutdown (SIGINT to the
// postmaster: sessions are ended, a shutdown checkpoint is written).
func (p *Postgres) Stop() error {
	return p.do(func(c *Proc) error {
		if pid := c.PID(); pid != 0 {
			_ = signalPID(pid, sigInt)
		}
		return c.Stop()
	})
}

// Start starts a stopped or killed server again on the same port and data.
func (p *Postgres) Start(ctx context.Context) error {
	return p.do(func(c *Proc) error { return c.Start(ctx) })
}

// Restart stops the server cleanly (Stop) and starts it again.
func (p *Postgres) Restart(ctx context.Context) error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.Start(ctx)
}

// Pause freezes the postmaster and every child with SIGSTOP (a frozen VM).
func (p *Postgres) Pause() error {
	return p.do(func(c *Proc) error {
		if err := c.Pause(); err != nil {
			return err
		}
		signalChildren(c.PID(), sigStop)
		return nil
	})
}

// Resume continues a paused server with SIGCONT.
func (p *Postgres) Resume() error {
	return p.do(func(c *Proc) error {
		signalChildren(c.PID(), sigCont)
		return c.Resume()
	})
}

// signalChildren sends sig to every process whose parent is ppid (Linux:
// read from /proc; elsewhere a no-op).
func signalChildren(ppid int, sig Signal) {
	if ppid == 0 {
		return
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			_ = signalPID(pid, sig)
		}
	}
}

func (p *Postgres) do(f func(*Proc) error) error {
	if p.Proc == nil {
		return ErrNoFaultControls
	}
	return f(p.Proc)
}

// postgresCred is the postgres user when we run as root (postgres refuses
// to run as root), else nil (run as ourselves).
func postgresCred() (*Credential, error) {
	if !isRoot() {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: no postgres user to run the server as (install postgresql): %v", ErrMissing, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("testserver: postgres user ids %q/%q", u.Uid, u.Gid)
	}
	return newCredential(uint32(uid), uint32(gid)), nil
}

// postgresPing connects once and runs an empty query.
func postgresPing(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.Exec(ctx, "-- ping").Close()
}

// PostgresDSNWith returns dsn with the query parameter name set to value.
func PostgresDSNWith(dsn, name, value string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

var shared struct {
	sync.Mutex
	pg  *Postgres
	err error
}

// SharedPostgres returns one server for the whole test binary: the one
// POSTGRES_URL names, else a child process started on first use (a fresh
// initdb costs about a second) and stopped by StopSharedPostgres, which the
// package's TestMain calls after m.Run. Tests on it must use unique lock
// names and tables. Fault tests use StartPostgresProcess instead. A missing
// binary skips tb (fails it under CI=true).
func SharedPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	p, err := sharedPostgres()
	if errors.Is(err, ErrMissing) {
		Unavailable(tb, "PostgreSQL 15", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// SharedPostgresURL is SharedPostgres for code without a testing.TB
// (runnable examples): the shared server's URL, or why it cannot start.
func SharedPostgresURL() (string, error) {
	p, err := sharedPostgres()
	if err != nil {
		return "", fmt.Errorf("%w; %s", err, InstallHint)
	}
	return p.URL(), nil
}

func sharedPostgres() (*Postgres, error) {
	if u := os.Getenv(PostgresURLEnv); u != "" {
		return &Postgres{url: u}, nil
	}
	shared.Lock()
	defer shared.Unlock()
	if shared.pg == nil && shared.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		shared.pg, shared.err = NewPostgres(ctx)
		cancel()
	}
	return shared.pg, shared.err
}

// StopSharedPostgres stops the server SharedPostgres started, if any.
func StopSharedPostgres() {
	shared.Lock()
	defer shared.Unlock()
	if shared.pg != nil {
		shared.pg.Cleanup()
		shared.pg = nil
	}
}

// Main runs a test binary's tests, then stops the shared PostgreSQL server
// (SharedPostgres) and, if they passed, fails on leaked goroutines. Use it as
// TestMain: func TestMain(m *testing.M) { testserver.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	StopSharedPostgres()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

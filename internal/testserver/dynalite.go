package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// Dynalite is one dynalite server (a DynamoDB-compatible server from npm,
// run with node): a child process started by StartDynalite or
// StartDynaliteProcess, or an existing DynamoDB endpoint named by
// DYNAMODB_URL (then Proc is nil and there are no fault controls).
//
// Know its gaps: no transactions, no TTL, no
// ReturnValuesOnConditionCheckFailure. Nothing here depends on them.
type Dynalite struct {
	// Proc is the child process (Kill, Pause, Resume, Restart, ...), or nil
	// for an existing server.
	Proc *Proc
	// Port is the HTTP port (0 for an existing server).
	Port int
	// Dir is the LevelDB data dir given with --path, or "" for an in-memory
	// server (which restarts empty).
	Dir string

	url string
}

// DynamoDBURLEnv names the environment variable that points StartDynalite
// at an existing DynamoDB (or emulator) instead of starting dynalite, e.g.
// dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:8000&create_table=true&dummy_credentials=true.
const DynamoDBURLEnv = "DYNAMODB_URL"

// DynaliteEnv names the environment variable giving the path of dynalite's
// cli.js, when it is not at <repo root>/.tools/node_modules/dynalite/cli.js.
const DynaliteEnv = "FENCELOCK_DYNALITE"

// DynaliteTable is the table named by the URLs of started servers.
const DynaliteTable = "fencelock"

// URL returns a dynamodb:// URL for the server: table DynaliteTable
// (created on first open), region us-east-1, the server's endpoint and
// dummy static credentials; or DYNAMODB_URL for an existing server.
func (d *Dynalite) URL() string { return d.url }

// Endpoint returns http://127.0.0.1:PORT ("" for an existing server).
func (d *Dynalite) Endpoint() string {
	if d.Port == 0 {
		return ""
	}
	return "http://" + Addr(d.Port)
}

// DynaliteOptions configures StartDynaliteProcess. nil gives the defaults.
type DynaliteOptions struct {
	// Persist keeps the data in a LevelDB dir (--path) under the test's
	// temp dir, so that a restarted server keeps its tables and items.
	// Default: in memory (a restart comes back empty).
	Persist bool
}

// StartDynalite returns a running DynamoDB-compatible server for tb: the
// one named by DYNAMODB_URL if set, else a new in-memory dynalite on a free
// 127.0.0.1 port, stopped when tb ends. A missing node or dynalite skips tb
// (fails it under CI=true).
func StartDynalite(tb testing.TB) *Dynalite {
	tb.Helper()
	if u := os.Getenv(DynamoDBURLEnv); u != "" {
		return &Dynalite{url: u}
	}
	return StartDynaliteProcess(tb, nil)
}

// StartDynaliteProcess is StartDynalite without the DYNAMODB_URL escape: it
// always starts a child process, for fault tests that kill, pause or
// restart it.
func StartDynaliteProcess(tb testing.TB, opts *DynaliteOptions) *Dynalite {
	tb.Helper()
	node, cli, err := dynaliteBinaries()
	if err != nil {
		Unavailable(tb, "dynalite", err)
	}
	dir := ""
	if opts != nil && opts.Persist {
		dir = filepath.Join(tb.TempDir(), "dynalite-data")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := startDynalite(ctx, node, cli, dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			state := "running"
			if pid := d.Proc.PID(); pid == 0 || !processAlive(pid) {
				state = "had EXITED before cleanup"
			}
			tb.Logf("dynalite %s (%s); its output:\n%s", d.Endpoint(), state, d.Proc.Output())
		}
		_ = d.Proc.Kill()
	})
	return d
}

// NewDynalite starts an in-memory dynalite outside of a test (for the
// CLI's compare command). The caller calls cleanup.
func NewDynalite(ctx context.Context) (d *Dynalite, cleanup func(), err error) {
	node, cli, err := dynaliteBinaries()
	if err != nil {
		return nil, nil, err
	}
	d, err = startDynalite(ctx, node, cli, "")
	if err != nil {
		return nil, nil, err
	}
	return d, func() { _ = d.Proc.Kill() }, nil
}

// DynaliteCLI returns the path of dynalite's cli.js: $FENCELOCK_DYNALITE,
// else .tools/node_modules/dynalite/cli.js in the first directory, walking
// up from this source file and then from the working directory, that has
// one.
func DynaliteCLI() (string, error) {
	if p := os.Getenv(DynaliteEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %v", ErrMissing, DynaliteEnv, p, err)
		}
		return p, nil
	}
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	const rel = ".tools/node_modules/dynalite/cli.js"
	for _, dir := range starts {
		for {
			p := filepath.Join(dir, rel)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("%w: dynalite (%s not found above %v; or set %s to its cli.js)", ErrMissing, rel, starts, DynaliteEnv)
}

func dynaliteBinaries() (node, cli string, err error) {
	node, err = LookPath("node", "/usr/bin/node", "/usr/local/bin/node")
	if err != nil {
		return "", "", err
	}
	cli, err = DynaliteCLI()
	return node, cli, err
}

// abortGuard is a node flag that preloads an uncaught-exception handler:
// dynalite (4.0) throws from a request's error handler when a client
// aborts a request while its body is being read (a cancelled context, a
// client timeout), which kills the server. The handler logs and ignores
// exactly that error (ECONNRESET: nothing of the request was run) and
// exits with status 70 on any other.
const abortGuard = "--import=data:text/javascript," +
	"process.on('uncaughtException',function(e){" +
	"if(e&&e.code==='ECONNRESET'){console.error('dynalite: ignored a request aborted by its client: '+e.message);return}" +
	"console.error(e);process.exit(70)})"

// startDynalite starts dynalite on a free port (retrying if the port was
// taken meanwhile), with table creation immediate (--createTableMs 0).
func startDynalite(ctx context.Context, node, cli, dir string) (*Dynalite, error) {
	var lastErr error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		args := []string{abortGuard, cli, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"}
		if dir != "" {
			args = append(args, "--path", dir)
		}
		addr := Addr(port)
		wd := dir
		if wd == "" {
			wd = os.TempDir()
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		p := &Proc{
			Name:  "dynalite " + addr,
			Path:  node,
			Args:  args,
			Dir:   wd,
			Ready: func(ctx context.Context) error { return httpReady(ctx, addr) },
		}
		if lastErr = p.Start(ctx); lastErr == nil {
			d := &Dynalite{Proc: p, Port: port, Dir: dir}
			d.url = "dynamodb://" + DynaliteTable + "?region=us-east-1&endpoint=http://" + addr + "&create_table=true&dummy_credentials=true"
			return d, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// httpReady reports whether an HTTP server answers on addr.
func httpReady(ctx context.Context, addr string) error {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return err
	}
	tr := &http.Transport{DialContext: (&net.Dialer{}).DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return errors.New("dynalite answered " + resp.Status)
	}
	return nil
}

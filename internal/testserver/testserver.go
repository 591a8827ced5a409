// Package testserver starts REAL lock stores (redis-server, PostgreSQL,
// ZooKeeper, embedded etcd, dynalite) as child processes on free 127.0.0.1
// ports in temp dirs, with fault controls (Stop, Kill, Pause via SIGSTOP,
// Resume via SIGCONT, Restart), for backend tests, fault tests and the CLI.
//
// A missing server binary skips the test with an install hint, except when
// the CI environment variable is "true": then it fails, so a CI run can never
// pass by skipping. A <BACKEND>_URL environment variable (REDIS_URL, ...)
// points a suite at an existing server instead; see each starter.
package testserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// InstallHint is what to run to install every test server.
const InstallHint = "run `make setup` (scripts/setup.sh) to install the test servers"

// InCI reports whether the CI environment variable is "true".
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips tb (or fails it under CI=true) because a server cannot
// be started: what says which, why says what is missing.
func Unavailable(tb testing.TB, what string, why error) {
	tb.Helper()
	msg := fmt.Sprintf("testserver: %s unavailable: %v; %s", what, why, InstallHint)
	if InCI() {
		tb.Fatal(msg + " (CI=true: a missing server is a failure, not a skip)")
	}
	tb.Skip(msg)
}

// ErrMissing reports a missing server binary.
var ErrMissing = errors.New("server binary not found")

// LookPath finds a binary on PATH or at one of the extra absolute paths.
func LookPath(name string, extra ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, p := range extra {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s", ErrMissing, name)
}

// FreePort returns a free TCP port on 127.0.0.1. Below 30000 is avoided so
// that port+10000 (Redis Cluster's bus port) stays valid.
func FreePort() (int, error) {
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if port < 55000 {
			return port, nil
		}
	}
	return 0, errors.New("testserver: no free port found")
}

// Addr formats 127.0.0.1:port.
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// SkipExternal skips tb because the suite points at an existing server
// (a <BACKEND>_URL variable) and the test needs a server of its own, for
// fault controls. Under CI=true it fails instead: CI must run every test.
func SkipExternal(tb testing.TB, why string) {
	tb.Helper()
	if InCI() {
		tb.Fatal("testserver: " + why + " (CI=true: unset the *_URL variable so fault tests get servers of their own)")
	}
	tb.Skip("testserver: " + why)
}

package main

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/conformance"
)

// capture runs f with os.Stdout redirected and returns what it printed.
func capture(t *testing.T, f func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	ferr := f()
	w.Close()
	os.Stdout = old
	return string(<-done), ferr
}

func TestDemoOnMem(t *testing.T) {
	out, err := capture(t, func() error {
		return runDemo(context.Background(), []string{"--url", "mem://cli-demo", "--ttl", "100ms"})
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	if !strings.Contains(out, "unfenced counter = 1") || !strings.Contains(out, "claim-first counter = 2") {
		t.Fatalf("demo did not end at 1 unfenced and 2 fenced:\n%s", out)
	}
	if !strings.Contains(out, "REJECTED") {
		t.Fatalf("demo did not show the stale write rejected:\n%s", out)
	}
}

func TestLostUpdatesOnMem(t *testing.T) {
	out, err := capture(t, func() error {
		return runLostUpdates(context.Background(), []string{"--url", "mem://cli-lost", "--workers", "4", "--sections", "200", "--stall", "0.05"})
	})
	if err != nil {
		t.Fatalf("lostupdates: %v\n%s", err, out)
	}
	var sawNoFence, sawClaim bool
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 {
			continue
		}
		lost := f[len(f)-2]
		switch {
		case strings.Contains(line, "no fencing"):
			sawNoFence = true
			if lost == "0" {
				t.Errorf("no fencing lost 0 with 5%% stalls:\n%s", out)
			}
		case strings.Contains(line, "claim-first"):
			sawClaim = true
			if lost != "0" {
				t.Errorf("claim-first lost %s:\n%s", lost, out)
			}
		}
	}
	if !sawNoFence || !sawClaim {
		t.Fatalf("table rows missing:\n%s", out)
	}
}

func TestConformanceCommandListsChecks(t *testing.T) {
	out, err := capture(t, func() error { return runConformance(context.Background(), []string{"--list"}) })
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out, "\n"); got != len(conformance.Checks()) {
		t.Fatalf("--list printed %d lines, want %d", got, len(conformance.Checks()))
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	err := runLostUpdates(context.Background(), []string{"--url", "mem://", "--stall", "2"})
	if err == nil || !strings.Contains(err.Error(), "between 0 and 1") {
		t.Fatalf("--stall 2: %v", err)
	}
	err = runDemo(context.Background(), []string{"--url", "nosuch://x"})
	if err == nil || !strings.Contains(err.Error(), "forgotten import") {
		t.Fatalf("unknown scheme: %v", err)
	}
}

func TestConformanceUnreachableStoreOneLine(t *testing.T) {
	start := time.Now()
	out, err := capture(t, func() error {
		return runConformance(context.Background(), []string{"--url", "redis://user:s3cret@127.0.0.1:1/0", "--probe-timeout", "5s"})
	})
	if err == nil {
		t.Fatalf("conformance against a closed port succeeded:\n%s", out)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "cannot reach redis://user:xxxxx@127.0.0.1:1/0: ") || !strings.Contains(msg, "refused") {
		t.Errorf("error %q: want one 'cannot reach <redacted url>: ...connection refused'", msg)
	}
	if strings.Contains(msg+out, "s3cret") {
		t.Errorf("the password was printed: %q\n%s", msg, out)
	}
	if strings.Contains(out, "PASS") || strings.Contains(out, "FAIL") {
		t.Errorf("checks ran against an unreachable store:\n%s", out)
	}
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("took %v to report an unreachable store", took)
	}
}

// A store that accepts connections and never answers: the probe gives up
// within --probe-timeout, before any check runs.
func TestConformanceSilentStoreProbeTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	out, err := capture(t, func() error {
		return runConformance(context.Background(), []string{"--url", "memrpc://" + ln.Addr().String(), "--probe-timeout", "1s"})
	})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "cannot reach memrpc://") || !strings.Contains(err.Error(), "no answer within 1s") {
		t.Fatalf("got %v, want 'cannot reach ...: no answer within 1s'\n%s", err, out)
	}
	if took > 3*time.Second {
		t.Errorf("took %v with a 1s probe timeout", took)
	}
}

func TestConformanceCommandOnMem(t *testing.T) {
	out, err := capture(t, func() error {
		return runConformance(context.Background(), []string{"--url", "mem://cli-conformance", "--run", "TryAcquire"})
	})
	if err != nil {
		t.Fatalf("conformance --run TryAcquire on mem://: %v\n%s", err, out)
	}
	if strings.Contains(out, "cleaned up after") || !strings.Contains(out, "nothing stays") {
		t.Errorf("want the header to say what stays in the store:\n%s", out)
	}
	if !strings.Contains(out, "PASS TryAcquireFree") || !strings.Contains(out, " 0 failed, 0 skipped") {
		t.Errorf("want TryAcquire checks passed, none failed or skipped:\n%s", out)
	}
}

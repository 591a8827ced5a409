package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

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

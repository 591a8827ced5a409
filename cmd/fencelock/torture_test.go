package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/conformance"
)

// TestTortureCommand: a short run on mem:// passes and writes the
// history (meta first, then operations the checker accepts again) and a
// timeline.
func TestTortureCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	hist, svg := filepath.Join(dir, "h.jsonl"), filepath.Join(dir, "t.svg")
	stdout := os.Stdout
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	os.Stdout = devnull
	err = runTorture(t.Context(), []string{"--url", "mem://torture-cmd", "--duration", "2s", "--seed", "5", "--history", hist, "--svg", svg})
	os.Stdout = stdout
	if err != nil {
		t.Fatalf("torture on mem://: %v", err)
	}
	f, err := os.Open(hist)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	first, _ := bufio.NewReader(f).ReadString('\n')
	if !strings.HasPrefix(first, `{"meta":`) || !strings.Contains(first, `"seed":5`) {
		t.Errorf("history starts %q, want the meta with seed 5", first)
	}
	_, _ = f.Seek(0, 0)
	h, err := conformance.ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(h.Ops()); n < 20 {
		t.Errorf("history holds %d operations", n)
	}
	if vs := conformance.CheckHistory(h); len(vs) > 0 {
		t.Errorf("the written history checks with violations: %v", vs)
	}
	b, err := os.ReadFile(svg)
	if err != nil || !strings.Contains(string(b), "<svg") {
		t.Errorf("timeline: %v", err)
	}
}

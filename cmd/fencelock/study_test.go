package main

import (
	"context"
	"strings"
	"testing"
)

func TestLostUpdatesStudyProfileOnMem(t *testing.T) {
	out, err := capture(t, func() error {
		return runLostUpdates(context.Background(), []string{"--url", "mem://cli-study", "--profile", "overlap", "--sections", "20", "--runs", "2"})
	})
	if err != nil {
		t.Fatalf("lostupdates --profile overlap: %v\n%s", err, out)
	}
	var rows int
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "| mem | 5% |") {
			continue
		}
		rows++
		cells := strings.Split(line, "|")
		if strings.Contains(line, "claim-first") && !strings.HasPrefix(strings.TrimSpace(cells[4]), "0 /") {
			t.Errorf("claim-first lost updates under the overlap protocol: %s", line)
		}
	}
	if rows != 3 {
		t.Fatalf("want one row per mode, got %d:\n%s", rows, out)
	}
	if !strings.Contains(out, "92 / 0") {
		t.Errorf("the study's published numbers are not printed next to ours:\n%s", out)
	}
}

func TestLostUpdatesBadProfile(t *testing.T) {
	_, err := capture(t, func() error {
		return runLostUpdates(context.Background(), []string{"--url", "mem://", "--profile", "nope"})
	})
	if err == nil || !strings.Contains(err.Error(), "study or overlap") {
		t.Fatalf("unknown profile: %v", err)
	}
}

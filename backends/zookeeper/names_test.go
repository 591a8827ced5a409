package zookeeper

import (
	"slices"
	"testing"
)

func TestScan(t *testing.T) {
	const token = "0f8fad5bd9cb469fa16570867728950e"
	prefix := nodePrefix(token)
	if prefix != "_c_0f8fad5b-d9cb-469f-a165-70867728950e-lock-" {
		t.Fatalf("nodePrefix = %q", prefix)
	}
	children := []string{
		"_c_11111111-2222-3333-4444-555555555555-lock-0000000004", // Curator
		prefix + "0000000009",                                // ours, retried create
		"abcdefabcdefabcdefabcdefabcdefab__lock__0000000002", // kazoo
		prefix + "0000000007",                                // ours
		"leases",                                             // not a contender
		"_c_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-lock-0000000008", // go-zookeeper
	}
	q := scan(children, prefix)
	if q.ours != prefix+"0000000007" || q.ourSeq != 7 {
		t.Fatalf("ours = %q (%d), want the lowest of ours", q.ours, q.ourSeq)
	}
	if !slices.Equal(q.extra, []string{prefix + "0000000009"}) {
		t.Fatalf("extra = %v", q.extra)
	}
	if q.lowest != "abcdefabcdefabcdefabcdefabcdefab__lock__0000000002" {
		t.Fatalf("lowest = %q, want the kazoo node", q.lowest)
	}
	if q.pred != "_c_11111111-2222-3333-4444-555555555555-lock-0000000004" {
		t.Fatalf("pred = %q, want the Curator node just ahead", q.pred)
	}
	if q.howMany != 4 {
		t.Fatalf("howMany = %d, want 4 (extras and non-contenders left out)", q.howMany)
	}
	if q := scan(children[4:5], prefix); q.ours != "" || q.lowest != "" || q.howMany != 0 {
		t.Fatalf("scan of no contenders = %+v", q)
	}
	// The Admin view: no node is ours.
	if q := scan(children, "\x00"); q.ours != "" || q.lowest != "abcdefabcdefabcdefabcdefabcdefab__lock__0000000002" || q.howMany != 6-1 {
		t.Fatalf("admin scan = %+v", q)
	}
}

// lockPath is LockPath, with fewer allocations.
func TestLockPathFast(t *testing.T) {
	for _, root := range []string{"/", "/locks", "/a/b", "/a//b", "/a/./b", "/a/../b", "/."} {
		for _, key := range []string{"job", "zookeeper", "a/b", ".", "..", ".hidden", "%", "x\x00y", "", "é"} {
			if got, want := lockPath(root, key), LockPath(root, key); got != want {
				t.Errorf("lockPath(%q, %q) = %q, LockPath = %q", root, key, got, want)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = lockPath("/locks", "job") }); n > 1 {
		t.Errorf("lockPath: %v allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = nodePrefix("0f8fad5bd9cb469fa16570867728950e") }); n > 1 {
		t.Errorf("nodePrefix: %v allocations, want 1", n)
	}
}

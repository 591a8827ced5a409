package zookeeper_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/zookeeper"
	"github.com/fencelock/fencelock/internal/testserver"
)

func TestURLs(t *testing.T) {
	u := sharedURL(t)
	hosts := strings.Join(servers(t, u), ",")
	ctx := t.Context()
	for _, tc := range []struct {
		url     string
		invalid bool
		want    string // in the error message
	}{
		{url: "zk://" + hosts + "/locks"},
		{url: "zk://" + hosts},
		{url: "zk://" + hosts + "/a/b/?session_timeout=10s&request_timeout=2s"},
		{url: "zk://" + hosts + "/locks?ttl=5s&prefix=p/&wait=1s"},
		{url: "zk://" + hosts + "/locks?bogus=1", invalid: true, want: "bogus"},
		{url: "zk://" + hosts + "/locks?session_timeout=ten", invalid: true, want: "session_timeout"},
		{url: "zk://" + hosts + "/locks?session_timeout=-1s", invalid: true, want: "session_timeout"},
		{url: "zk://" + hosts + "/locks?request_timeout=0s", invalid: true, want: "request_timeout"},
		{url: "zk://user:secret@" + hosts + "/locks", invalid: true, want: "Digest"},
		{url: "zk:///locks", invalid: true, want: "no hosts"},
	} {
		c, err := fencelock.Open(ctx, tc.url)
		if tc.invalid {
			if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%q) = %v; want ErrInvalid mentioning %q", tc.url, err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("Open(%q): error shows the password: %v", tc.url, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", tc.url, err)
			continue
		}
		caps := c.Capabilities()
		if caps.Backend != "zookeeper" || caps.Fence != fencelock.FenceStrict || !caps.FIFO {
			t.Errorf("Open(%q): capabilities %+v", tc.url, caps)
		}
		if os.Getenv(testserver.ZooKeeperURLEnv) == "" && caps.MinTTL != testserver.ZKMinSessionTimeout {
			t.Errorf("MinTTL %v, want the server's minSessionTimeout %v", caps.MinTTL, testserver.ZKMinSessionTimeout)
		}
		_ = c.Close()
	}
}

// An ensemble nobody answers for: Open fails with ErrUnavailable, quickly.
func TestOpenUnreachable(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = fencelock.Open(ctx, "zk://"+testserver.Addr(port)+"/locks?request_timeout=1s")
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Open of a dead port: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Open of a dead port took %v", took)
	}
}

func TestLockPathAndEscape(t *testing.T) {
	for _, tc := range []struct{ root, key, want string }{
		{"/locks", "job", "/locks/job"},
		{"locks/", "job", "/locks/job"},
		{"", "job", "/job"},
		{"/", "zookeeper", "/%7Aookeeper"},
		{"/locks", "zookeeper", "/locks/zookeeper"},
		{"/locks", "a/b", "/locks/a%2Fb"},
		{"/locks", "50%", "/locks/50%25"},
		{"/locks", ".", "/locks/%2E"},
		{"/locks", "..", "/locks/%2E."},
		{"/locks", "a.b", "/locks/a.b"},
		{"/locks", "tab\there", "/locks/tab%09here"},
		{"/locks", "ü/日本", "/locks/ü%2F日本"},
		{"/locks", "priv\uE000", "/locks/priv%EE%80%80"},
	} {
		if got := zookeeper.LockPath(tc.root, tc.key); got != tc.want {
			t.Errorf("LockPath(%q, %q) = %q, want %q", tc.root, tc.key, got, tc.want)
		}
	}
	// Escaping is injective on the awkward cases: no two keys meet.
	keys := []string{"a", "a/b", "a%2Fb", "a%252Fb", ".", "%2E", "..", "%2E.", "zookeeper"}
	seen := map[string]string{}
	for _, k := range keys {
		p := zookeeper.LockPath("/", k)
		if o, dup := seen[p]; dup {
			t.Errorf("keys %q and %q both map to %q", o, k, p)
		}
		seen[p] = k
	}
}

func TestSeqOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		seq  int64
		ok   bool
	}{
		{"_c_0f8fad5b-d9cb-469f-a165-70867728950e-lock-0000000042", 42, true}, // Curator, us
		{"_c_0f8fad5bd9cb469fa16570867728950e-lock-0000000007", 7, true},      // go-zookeeper
		{"lock-0000000003", 3, true},                                          // zk.Lock without protection
		{"0f8fad5bd9cb469fa16570867728950e__lock__0000000005", 5, true},       // kazoo Lock
		{"0f8fad5bd9cb469fa16570867728950e__rlock__0000000006", 6, true},      // kazoo ReadLock
		{"_c_x-lock--000000001", -1, true},                                    // after overflow
		{"leases", 0, false},
		{"member-0000000001", 0, false},
		{"_c_x-lock-00000001", 0, false},
	} {
		seq, ok := zookeeper.SeqOf(tc.name)
		if ok != tc.ok || seq != tc.seq {
			t.Errorf("seqOf(%q) = %d, %v; want %d, %v", tc.name, seq, ok, tc.seq, tc.ok)
		}
	}
}

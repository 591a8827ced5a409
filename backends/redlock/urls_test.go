package redlock

import (
	"crypto/tls"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/driver"
)

func TestURLOptions(t *testing.T) {
	for _, tc := range []struct {
		url   string
		addrs []string
		db    int
		user  string
		pass  string
		pool  int
		tls   []bool
		proto int // 0: 2
	}{
		{url: "redlock://h1:6379,h2:6379,h3:6379", addrs: []string{"h1:6379", "h2:6379", "h3:6379"}},
		{url: "redlock://h1,h2,h3:7000,h4:7001,h5:7002/2", addrs: []string{"h1:6379", "h2:6379", "h3:7000", "h4:7001", "h5:7002"}, db: 2},
		{url: "redlock://:secret@h1:1,h2:2,h3:3/", addrs: []string{"h1:1", "h2:2", "h3:3"}, pass: "secret"},
		{url: "redlock://alice:pw@h1:1,h2:2,h3:3?pool_size=4", addrs: []string{"h1:1", "h2:2", "h3:3"}, user: "alice", pass: "pw", pool: 4},
		{url: "redlock://?addr=[::1]:7000&addr=[::1]:7001&addr=[::1]:7002", addrs: []string{"[::1]:7000", "[::1]:7001", "[::1]:7002"}},
		{url: "redlock://h1:1,h2:2?addr=[::1]:7000", addrs: []string{"h1:1", "h2:2", "[::1]:7000"}},
		{url: "redlock://h1:1,h2:2?addr=rediss://secure.example.com:6380", addrs: []string{"h1:1", "h2:2", "secure.example.com:6380"}, tls: []bool{false, false, true}},
		{url: "redlock://h1:1,h2:2?addr=redis://h3:3", addrs: []string{"h1:1", "h2:2", "h3:3"}},
		{url: "redlock://h1:1,h2:2,h3:3?protocol=3", addrs: []string{"h1:1", "h2:2", "h3:3"}, proto: 3},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		os, err := (&URLOpener{}).options(u)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if len(os) != len(tc.addrs) {
			t.Errorf("%s: %d primaries, want %d", tc.url, len(os), len(tc.addrs))
			continue
		}
		name := os[0].ClientName
		if !strings.HasPrefix(name, "fencelock-redlock-") {
			t.Errorf("%s: ClientName %q", tc.url, name)
		}
		for i, o := range os {
			wantTLS := tc.tls != nil && tc.tls[i]
			if o.Addr != tc.addrs[i] || o.DB != tc.db || o.Username != tc.user || o.Password != tc.pass || o.PoolSize != tc.pool ||
				(o.TLSConfig != nil) != wantTLS || !o.ContextTimeoutEnabled || o.MaxRetries != -1 || o.ClientName != name ||
				o.Protocol != max(tc.proto, 2) {
				t.Errorf("%s: primary %d: addr %q db %d user %q pass %q pool %d tls %v ctxTimeout %v retries %d name %q protocol %d",
					tc.url, i, o.Addr, o.DB, o.Username, o.Password, o.PoolSize, o.TLSConfig != nil, o.ContextTimeoutEnabled, o.MaxRetries, o.ClientName, o.Protocol)
			}
			if wantTLS && o.TLSConfig.ServerName != "secure.example.com" {
				t.Errorf("%s: TLS server name %q", tc.url, o.TLSConfig.ServerName)
			}
		}
	}
}

func TestURLTLSConfig(t *testing.T) {
	u, _ := url.Parse("redlock://a.example:1,b.example:2,c.example:3")
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	os, err := (&URLOpener{TLSConfig: cfg}).options(u)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"a.example", "b.example", "c.example"} {
		c := os[i].TLSConfig
		if c == nil || c == cfg || c.ServerName != want || c.MinVersion != tls.VersionTLS13 {
			t.Errorf("primary %d: TLS config %+v, want a clone with ServerName %q", i, c, want)
		}
	}
	if cfg.ServerName != "" {
		t.Error("the opener's TLSConfig was modified")
	}
}

func TestURLOptionsInvalid(t *testing.T) {
	for _, raw := range []string{
		"redlock://h1:1,h2:2,h3:3?nope=1",       // unknown parameter
		"redlock://h1:1,h2:2,h3:3?cluster=true", // a redis:// parameter
		"redlock://h1:1,h2:2",                   // too few
		"redlock://h1:1",                        // too few
		"redlock://h1:1,h2:2,h3:3,h4:4",         // even
		"redlock://",                            // none
		"redlock://h1:1,h1:1,h3:3",              // duplicate
		"redlock://h1:1,,h3:3",                  // empty host
		"redlock://h1:1,h2:2,h3:99999",          // bad port
		"redlock://h1:1,h2:2,h3:3/x",            // bad db
		"redlock://h1:1,h2:2,h3:3/-1",           // bad db
		"redlock://h1:1,h2:2,h3:3?pool_size=0",  // bad pool
		"redlock://h1:1,h2:2,h3:3?protocol=4",   // bad RESP version
		"redlock://h1:1,h2:2,h3:3?pool_size=1&pool_size=2",
		"redis://h1:1,h2:2,h3:3", // wrong scheme
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = (&URLOpener{}).options(u)
		if !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", raw, err)
		}
	}
}

func TestURLPasswordRedacted(t *testing.T) {
	u, _ := url.Parse("redlock://:hunter2@h1:1,h2:2")
	_, err := (&URLOpener{}).options(u)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error %v: want an error without the password", err)
	}
}

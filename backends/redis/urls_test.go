package redis

import (
	"crypto/tls"
	"errors"
	"net/url"
	"slices"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/driver"
)

func TestURLOptions(t *testing.T) {
	for _, tc := range []struct {
		url     string
		addrs   []string
		db      int
		user    string
		pass    string
		cluster bool
		pool    int
		tls     bool
		proto   int // 0: 2
	}{
		{url: "redis://127.0.0.1:6379", addrs: []string{"127.0.0.1:6379"}},
		{url: "redis://localhost", addrs: []string{"localhost:6379"}},
		{url: "redis://:secret@h:7000/3", addrs: []string{"h:7000"}, db: 3, pass: "secret"},
		{url: "redis://alice:secret@h/", addrs: []string{"h:6379"}, user: "alice", pass: "secret"},
		{url: "redis://h3,h1:7000,h2:7001", addrs: []string{"h3:6379", "h1:7000", "h2:7001"}, cluster: true},
		{url: "redis://h1:7000?cluster=true", addrs: []string{"h1:7000"}, cluster: true},
		{url: "redis://h1:7000?cluster=false&pool_size=4", addrs: []string{"h1:7000"}, pool: 4},
		{url: "redis://?addr=[::1]:7000&addr=[::1]:7001", addrs: []string{"[::1]:7000", "[::1]:7001"}, cluster: true},
		{url: "redis://[::1]/1", addrs: []string{"[::1]:6379"}, db: 1},
		{url: "rediss://cache.example.com:6380", addrs: []string{"cache.example.com:6380"}, tls: true},
		{url: "redis://h?protocol=3", addrs: []string{"h:6379"}, proto: 3},
		{url: "redis://h?protocol=2", addrs: []string{"h:6379"}, proto: 2},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		o, err := (&URLOpener{}).options(u)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if !slices.Equal(o.Addrs, tc.addrs) || o.DB != tc.db || o.Username != tc.user || o.Password != tc.pass ||
			o.IsClusterMode != tc.cluster || o.PoolSize != tc.pool || (o.TLSConfig != nil) != tc.tls || !o.ContextTimeoutEnabled ||
			o.Protocol != max(tc.proto, 2) {
			t.Errorf("%s: got addrs %v db %d user %q pass %q cluster %v pool %d tls %v ctxTimeout %v protocol %d",
				tc.url, o.Addrs, o.DB, o.Username, o.Password, o.IsClusterMode, o.PoolSize, o.TLSConfig != nil, o.ContextTimeoutEnabled, o.Protocol)
		}
		if tc.tls && o.TLSConfig.ServerName != "cache.example.com" {
			t.Errorf("%s: TLS server name %q", tc.url, o.TLSConfig.ServerName)
		}
	}
}

func TestURLOptionsInvalid(t *testing.T) {
	for _, raw := range []string{
		"redis://h?nope=1",
		"redis://h?cluster=maybe",
		"redis://h?cluster=true&cluster=true",
		"redis://h1,h2?cluster=false",
		"redis://h1,h2/2",
		"redis://h/x",
		"redis://h/-1",
		"redis://h?pool_size=0",
		"redis://h?pool_size=x",
		"redis://h?protocol=1",
		"redis://h?protocol=4",
		"redis://h?protocol=resp3",
		"redis://h:0",
		"redis://h:99999",
		"redis://",
		"redis://h1,,h2",
		"redis://:7000",
		"memcache://h",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		_, err = (&URLOpener{}).options(u)
		if !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", raw, err)
		}
	}
}

func TestURLOpenerHooks(t *testing.T) {
	cfg := &tls.Config{ServerName: "other", MinVersion: tls.VersionTLS13}
	var seen *goredis.UniversalOptions
	o := &URLOpener{TLSConfig: cfg, Configure: func(uo *goredis.UniversalOptions) { uo.MaxRetries = 7; seen = uo }}
	u, _ := url.Parse("rediss://h:6380")
	b, err := o.OpenBackendURL(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if seen == nil || seen.MaxRetries != 7 || seen.TLSConfig.ServerName != "other" || seen.TLSConfig == cfg {
		t.Fatalf("Configure saw %+v; want MaxRetries 7 and a clone of TLSConfig", seen)
	}
}

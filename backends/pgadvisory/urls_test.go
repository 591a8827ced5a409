package pgadvisory_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
	"github.com/fencelock/fencelock/driver"
)

// TestURLs opens URLs without a server (Open does not connect).
func TestURLs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		url     string
		fence   driver.FenceGuarantee
		maxConn int32
	}{
		{"postgres://u@127.0.0.1:5432/db?sslmode=disable", fencelock.FenceStrict, 0},
		{"postgresql://u:secret@127.0.0.1/db", fencelock.FenceStrict, 0},
		{"postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write&connect_timeout=3", fencelock.FenceStrict, 0},
		{"postgres://u@127.0.0.1/db?pool_max_conns=40&application_name=app&options=-c%20search_path%3Dx", fencelock.FenceStrict, 40},
		{"postgres://u@127.0.0.1/db?statement_timeout=5s&myext.setting=1&ttl=5s&prefix=p/", fencelock.FenceStrict, 0},
		{"postgres://u@127.0.0.1/db?fence_flush=false", fencelock.FenceBestEffort, 0},
		{"postgres://u@127.0.0.1/db?fence_flush=true&default_query_exec_mode=simple_protocol", fencelock.FenceStrict, 0},
	} {
		c, err := fencelock.Open(ctx, tc.url)
		if err != nil {
			t.Errorf("Open(%q): %v", tc.url, err)
			continue
		}
		caps := c.Capabilities()
		if caps.Backend != "pgadvisory" || caps.Fence != tc.fence || caps.Wait != driver.WaitQueue || !caps.FIFO {
			t.Errorf("Open(%q): capabilities %+v", tc.url, caps)
		}
		var pool *pgxpool.Pool
		if !c.As(&pool) || pool == nil {
			t.Errorf("Open(%q): As(**pgxpool.Pool) failed", tc.url)
		} else if tc.maxConn != 0 && pool.Config().MaxConns != tc.maxConn {
			t.Errorf("Open(%q): MaxConns %d, want %d", tc.url, pool.Config().MaxConns, tc.maxConn)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	for _, tc := range []struct{ url, want string }{
		{"postgres://u@127.0.0.1/db?bogus=1", "bogus"},
		{"postgres://u@127.0.0.1/db?pool_max_con=4", "pool_max_con"},
		{"postgres://u@127.0.0.1/db?fence_flush=maybe", "fence_flush"},
		{"postgres://u@127.0.0.1/db?sslmode=disable&sslmode=require", "given 2 times"},
		{"postgres://u@127.0.0.1/db?pool_max_conns=many", "pool_max_conns"},
		{"postgres://u@127.0.0.1/db?ttl=-1s", "ttl"},
		{"postgres://u:hunter2@127.0.0.1/db?connect_timeout=soon", "connect_timeout"},
	} {
		_, err := fencelock.Open(ctx, tc.url)
		if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want ErrInvalid mentioning %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) error shows the password: %v", tc.url, err)
		}
	}
	// The opener itself refuses a scheme it does not serve.
	u := mustParse(t, "mysql://u@127.0.0.1/db")
	if _, err := (&pgadvisory.URLOpener{}).OpenBackendURL(ctx, u); !errors.Is(err, fencelock.ErrInvalid) {
		t.Errorf("OpenBackendURL(mysql://) = %v, want ErrInvalid", err)
	}
}

// TestURLOpenerConfigure checks the Configure hook sees the parsed config.
func TestURLOpenerConfigure(t *testing.T) {
	var got int32
	o := &pgadvisory.URLOpener{Configure: func(c *pgxpool.Config) error { got = c.MaxConns; return nil }}
	b, err := o.OpenBackendURL(context.Background(), mustParse(t, "postgres://u@127.0.0.1/db?pool_max_conns=7"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got != 7 {
		t.Errorf("Configure saw MaxConns %d, want 7", got)
	}
	boom := errors.New("boom")
	o.Configure = func(*pgxpool.Config) error { return boom }
	if _, err := o.OpenBackendURL(context.Background(), mustParse(t, "postgres://u@127.0.0.1/db")); !errors.Is(err, boom) {
		t.Errorf("OpenBackendURL with a failing Configure = %v, want its error", err)
	}
}

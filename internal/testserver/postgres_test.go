package testserver

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPostgresFaultControls: the server starts as the postgres user, and
// Stop (clean), Kill (crash), Pause and Resume act on every server process.
func TestPostgresFaultControls(t *testing.T) {
	ctx := t.Context()
	p := StartPostgresProcess(t)
	conn := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, p.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	c := conn()
	var v string
	if err := c.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "BEGIN"); err != nil { // a session idle in a transaction
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Stop took %v with a session open: not a fast shutdown", d)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c = conn()
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := c.QueryRow(qctx, "SELECT 1").Scan(new(int))
	cancel()
	if err == nil {
		t.Fatalf("a query answered while the server was paused")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := conn().QueryRow(ctx, "SELECT 1").Scan(new(int)); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start after Kill: %v", err)
	}
	if err := conn().QueryRow(ctx, "SELECT 1").Scan(new(int)); err != nil {
		t.Fatalf("after Kill and Start: %v", err)
	}
	t.Logf("PostgreSQL %s: Stop, Pause, Resume, Kill, Start ok", v)
}

package pgadvisory

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestInspectLabelWhileRegranted: a connection that releases and is
// granted again changes its application_name in between (RESET, then the
// next label); Inspect, reading pg_locks and pg_stat_activity at
// different instants, must never pair a hold with the name the session
// has between two holds (the pool's application_name; seen as an empty
// label by election's Observe, ElectionObserveInOrder's flake).
func TestInspectLabelWhileRegranted(t *testing.T) {
	ctx := context.Background()
	url := testserver.SharedPostgres(t).URL() + "&application_name=between-holds"
	hp, err := pgxpool.New(ctx, url+"&pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	holder := newBackend(hp, true, &Config{LabelAppName: true, NoFenceFlush: true})
	defer holder.Close()
	ip, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	insp := newBackend(ip, true, &Config{LabelAppName: true})
	defer insp.Close()
	name := "inspect-regranted-" + t.Name()
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			l, err := holder.TryAcquire(ctx, driver.AcquireRequest{Name: name, TTL: 10 * time.Second, Label: "label-" + strconv.Itoa(i%2)})
			if err != nil {
				done <- err
				return
			}
			if err := l.Release(ctx); err != nil {
				done <- err
				return
			}
		}
	}()
	held, unreadable := 0, 0
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		info, err := insp.Inspect(ctx, name)
		if errors.Is(err, driver.ErrUnavailable) {
			unreadable++ // it changed hands at every read: allowed, said so
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			continue
		}
		held++
		if info.Label != "label-0" && info.Label != "label-1" {
			t.Errorf("held with label %q", info.Label)
			break
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d answers held, %d unreadable", held, unreadable)
}

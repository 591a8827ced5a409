package pgadvisory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/pgadvisory"
)

// TestNewRejectsBadConfig: New reports a nil pool or a negative setting
// as ErrInvalid, before any I/O.
func TestNewRejectsBadConfig(t *testing.T) {
	pool := new(pgxpool.Pool) // never used: New rejects the config first
	for _, tc := range []struct {
		what string
		pool *pgxpool.Pool
		cfg  *pgadvisory.Config
	}{
		{"nil pool", nil, nil},
		{"negative ConnTimeout", pool, &pgadvisory.Config{ConnTimeout: -time.Second}},
		{"negative MaxWaitConns", pool, &pgadvisory.Config{MaxWaitConns: -1}},
	} {
		if c, err := pgadvisory.New(tc.pool, tc.cfg, nil); c != nil || !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("%s: %v, %v; want nil, ErrInvalid", tc.what, c, err)
		}
	}
}

package peers

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestStartFailureStopsStarted: when one store cannot start, Start returns
// its error (no panic on the way out, no Env) and the servers already
// started are stopped.
func TestStartFailureStopsStarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if env, err := Start(ctx, []string{"redis", "nosuchstore"}); err == nil || env != nil {
		env.Close()
		t.Fatalf("Start with an unknown store = (%v, %v), want (nil, error)", env, err)
	} else if !strings.Contains(err.Error(), "nosuchstore") {
		t.Errorf("error %q does not name the store that failed", err)
	}

	env := &Env{Servers: map[string]string{}}
	if err := env.startAll(ctx, []string{"redis", "nosuchstore"}); err == nil {
		env.Close()
		t.Fatal("startAll with an unknown store: no error")
	}
	if len(env.Floors) == 0 {
		t.Fatal("redis started no floor; cannot check it was stopped")
	}
	op, closeOp, err := env.Floors[0].Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeOp()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if err := op(pctx); err == nil {
		t.Error("redis still answers after startAll failed: the started server was not stopped")
	}

	var nilEnv *Env
	nilEnv.Close() // must not panic
}

package memory

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// Schemes registered by this package.
const (
	Scheme    = "mem"
	RPCScheme = "memrpc"
)

func init() {
	fencelock.Register(Scheme, fencelock.URLOpenerFunc(openMem))
	fencelock.Register(RPCScheme, fencelock.URLOpenerFunc(openRPC))
}

var (
	namedMu sync.Mutex
	named   = map[string]*Store{}
)

// Named returns the process-wide Store that mem://NAME opens ("" for the
// default store of mem://).
func Named(name string) *Store {
	namedMu.Lock()
	defer namedMu.Unlock()
	s := named[name]
	if s == nil {
		s = NewStore()
		named[name] = s
	}
	return s
}

func openMem(_ context.Context, u *url.URL) (driver.Backend, error) {
	if err := fencelock.UnknownParams(u.Query()); err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" || u.User != nil || u.Port() != "" {
		return nil, fmt.Errorf("%w: mem URL %q: want mem:// or mem://NAME", fencelock.ErrInvalid, u.Redacted())
	}
	return newBackend(Named(u.Host)), nil
}

func openRPC(ctx context.Context, u *url.URL) (driver.Backend, error) {
	if err := fencelock.UnknownParams(u.Query()); err != nil {
		return nil, err
	}
	if u.Host == "" || u.Port() == "" {
		return nil, fmt.Errorf("%w: memrpc URL %q: want memrpc://HOST:PORT", fencelock.ErrInvalid, u.Redacted())
	}
	return dialRPC(ctx, u.Host)
}

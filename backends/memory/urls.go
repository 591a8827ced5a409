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
	fencelock.Register(RPCScheme, rpcOpener{})
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

// rpcOpener opens memrpc:// URLs, whose store address can be rewritten
// (fencelock.AddrRewriter: the conformance suite's fault proxy).
type rpcOpener struct{}

func (rpcOpener) OpenBackendURL(ctx context.Context, u *url.URL) (driver.Backend, error) {
	return openRPC(ctx, u)
}

func (rpcOpener) RewriteStoreAddrs(u *url.URL, rewrite func(addr string) (string, error)) (*url.URL, error) {
	u2 := *u
	if err := fencelock.RewriteHostList(&u2, "", rewrite); err != nil {
		return nil, err
	}
	return &u2, nil
}

package memory_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/memory"
	"github.com/fencelock/fencelock/conformance"
)

// harness serves one Store in-process and over memrpc:// for the
// process-freeze check's child.
type harness struct {
	s    *memory.Store
	ln   net.Listener
	done chan struct{}
	stallers
}

var (
	_ conformance.RenewalStaller = (*harness)(nil)
)

func newHarness(rpc bool) conformance.HarnessMaker {
	return func(ctx context.Context, t testing.TB) (conformance.Harness, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		h := &harness{s: memory.NewStore(), ln: ln, done: make(chan struct{})}
		go func() { defer close(h.done); _ = memory.Serve(ln, h.s) }()
		if rpc {
			return rpcHarness{h}, nil
		}
		return h, nil
	}
}

func (h *harness) MakeClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	return h.client(h.s, opts), nil
}

// rpcHarness makes memrpc:// clients of the same served Store; it has no
// session to kill.
type rpcHarness struct{ h *harness }

func (r rpcHarness) MakeClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, error) {
	return fencelock.DefaultURLMux().Open(ctx, r.h.URL(), opts)
}

// PartitionedClient: a memrpc:// client behind fault proxies.
func (r rpcHarness) PartitionedClient(ctx context.Context, opts *fencelock.Options) (*fencelock.Client, *conformance.Faults, error) {
	u, f, err := conformance.ProxyURL(r.h.URL())
	if err != nil {
		return nil, nil, err
	}
	c, err := fencelock.DefaultURLMux().Open(ctx, u, opts)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return c, f, nil
}

func (r rpcHarness) URL() string                                  { return r.h.URL() }
func (r rpcHarness) Close()                                       { r.h.Close() }
func (r rpcHarness) Expire(ctx context.Context, key string) error { return r.h.Expire(ctx, key) }

func (h *harness) URL() string { return "memrpc://" + h.ln.Addr().String() }

func (h *harness) Close() {
	h.ln.Close()
	<-h.done
}

// IgnoreGoroutines: the served Store's connection goroutines are the
// store's, not the client's.
func (h *harness) IgnoreGoroutines() []goleak.Option {
	return []goleak.Option{goleak.IgnoreAnyFunction("net/rpc.(*Server).ServeCodec")}
}

func (r rpcHarness) IgnoreGoroutines() []goleak.Option { return r.h.IgnoreGoroutines() }

func (h *harness) Expire(_ context.Context, key string) error {
	if !h.s.Expire(key) {
		return errors.New("not held")
	}
	return nil
}

func (h *harness) KillSession(_ context.Context, c *fencelock.Client) error {
	var sess memory.Session
	if !c.As(&sess) {
		return errors.New("not a mem:// client")
	}
	h.s.KillSession(sess)
	return nil
}

func TestConformance(t *testing.T) { conformance.RunConformanceTests(t, newHarness(false)) }

func TestConformanceRPC(t *testing.T) { conformance.RunConformanceTests(t, newHarness(true)) }

func BenchmarkMemory(b *testing.B) { conformance.RunBenchmarks(b, newHarness(false)) }

package etcd_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// TestOpenFailsFastAndClear: a refused port fails Open with ErrUnavailable
// at once, not after the request timeout; a server that is not etcd (an
// HTTP/2 server answering 404) fails it with ErrInvalid, saying to check
// the URL.
func TestOpenFailsFastAndClear(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = fencelock.Open(ctx, "etcd://"+closed+"/locks")
	took := time.Since(start)
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Open on a closed port: %v, want ErrUnavailable", err)
	}
	if took > 2*time.Second {
		t.Errorf("Open on a closed port took %v, want well under the 5 s request timeout", took)
	}

	h2 := httptest.NewUnstartedServer(http.NotFoundHandler())
	h2.Config.Protocols = new(http.Protocols)
	h2.Config.Protocols.SetUnencryptedHTTP2(true)
	h2.Start()
	defer h2.Close()
	_, err = fencelock.Open(ctx, "etcd://"+strings.TrimPrefix(h2.URL, "http://")+"/locks")
	if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), "check the URL") {
		t.Fatalf("Open on an HTTP server: %v, want ErrInvalid saying to check the URL", err)
	}
}

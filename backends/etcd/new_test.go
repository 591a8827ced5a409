package etcd_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/backends/etcd"
)

// TestNewRejectsBadConfig: New reports a nil client or a negative
// duration as ErrInvalid, before any I/O.
func TestNewRejectsBadConfig(t *testing.T) {
	cli := new(clientv3.Client) // never used: New rejects the config first
	for _, tc := range []struct {
		what string
		cli  *clientv3.Client
		cfg  *etcd.Config
	}{
		{"nil client", nil, nil},
		{"negative RequestTimeout", cli, &etcd.Config{RequestTimeout: -time.Second}},
		{"negative MinTTL", cli, &etcd.Config{MinTTL: -time.Second}},
	} {
		if c, err := etcd.New(tc.cli, tc.cfg, nil); c != nil || !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("%s: %v, %v; want nil, ErrInvalid", tc.what, c, err)
		}
	}
}

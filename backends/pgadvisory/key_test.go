package pgadvisory_test

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/backends/pgadvisory"
)

// TestKeyMatchesPython checks Key against values computed once with
//
//	python3 -c 'import hashlib; print(int.from_bytes(hashlib.blake2b(n.encode(), digest_size=8).digest(), "big", signed=True))'
//
// (CPython 3.11, hashlib's BLAKE2b with digest_size=8).
func TestKeyMatchesPython(t *testing.T) {
	for _, tc := range []struct {
		what, name string
		want       int64
	}{
		{"ascii", "nightly-report", -9216380091565040003},
		{"empty", "", -1970711489451281740},
		{"unicode and slash", "ü/日本", -7166640944725728806},
		{"1 KiB of a", strings.Repeat("a", 1024), -4902477937600867419},
		{"1 KiB mixed", strings.Repeat("x", 1000) + strings.Repeat("ü", 12), -1320933521106932519},
	} {
		if got := pgadvisory.Key(tc.name); got != tc.want {
			t.Errorf("Key(%s) = %d, want %d (Python's blake2b digest_size=8, big-endian, signed)", tc.what, got, tc.want)
		}
	}
}

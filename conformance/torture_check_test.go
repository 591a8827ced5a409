package conformance_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/conformance"
)

// TestCheckAfterDrop: an Extend sent after an admin expire of its name
// that began after its lease's grant returned must not succeed; a failed
// Extend, an expire that failed, an expire of another name and a lease
// granted after the expire are fine.
func TestCheckAfterDrop(t *testing.T) {
	const ms = int64(time.Millisecond)
	hist := func(extendResult, expireName, expireTarget string, grantAt int64) string {
		return fmt.Sprintf(`{"meta":{"backend":"mem","seed":1,"workers":2,"names":1,"proxied":-1,"child":-1,"ttl":%d,"max_ttl":%d}}
{"op":{"id":1,"worker":0,"client":0,"kind":"try","name":"n0","invoke":%d,"complete":%d,"result":"ok","fence":1,"valid_until":%d,"end":%d}}
{"op":{"id":2,"worker":0,"client":0,"kind":"extend","name":"n0","lease":1,"invoke":%d,"complete":%d,"result":%q}}
{"fault":{"id":1,"kind":"expire","target":%q,"name":%q,"start":%d,"end":%d}}
`, 400*ms, 800*ms, grantAt, grantAt+ms, 900*ms, 900*ms, 200*ms, 201*ms, extendResult, expireTarget, expireName, 100*ms, 100*ms)
	}
	for _, c := range []struct {
		what                             string
		extend, expireName, expireTarget string
		grantAt                          int64
		want                             int
	}{
		{"extend succeeded after the expire", "ok", "n0", "store", 10 * ms, 1},
		{"extend lost after the expire", "lost", "n0", "store", 10 * ms, 0},
		{"expire failed", "ok", "n0", "store (failed: not held)", 10 * ms, 0},
		{"expire of another name", "ok", "n1", "store", 10 * ms, 0},
		{"granted after the expire", "ok", "n0", "store", 150 * ms, 0},
	} {
		h, err := conformance.ReadHistory(strings.NewReader(hist(c.extend, c.expireName, c.expireTarget, c.grantAt)))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, v := range conformance.CheckHistory(h) {
			if v.Check == "after-drop" {
				n++
			}
		}
		if n != c.want {
			t.Errorf("%s: %d after-drop violations, want %d (%v)", c.what, n, c.want, conformance.CheckHistory(h))
		}
	}
}

package driver_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/driver"
)

// TestFenceShapes: a Fence prints and marshals as the plain number it
// was as a uint64 (the CLI's --json output and the torture history keep
// their shape), and Int64 is the same number.
func TestFenceShapes(t *testing.T) {
	f := driver.Fence(1<<62 + 7)
	const want = "4611686018427387911"
	b, err := json.Marshal(struct {
		F driver.Fence `json:"fence"`
	}{f})
	if err != nil || string(b) != `{"fence":`+want+`}` {
		t.Errorf("json = %s, %v; want a number", b, err)
	}
	var back struct {
		F driver.Fence `json:"fence"`
	}
	if err := json.Unmarshal(b, &back); err != nil || back.F != f {
		t.Errorf("json round trip = %d, %v", back.F, err)
	}
	if s := fmt.Sprintf("%v %d %s", f, f, f); s != want+" "+want+" "+want {
		t.Errorf("fmt = %q", s)
	}
	if f.Int64() != 1<<62+7 {
		t.Errorf("Int64 = %d", f.Int64())
	}
}

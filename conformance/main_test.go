package conformance_test

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/conformance"
)

func TestMain(m *testing.M) {
	// The torture's child-process worker re-executes this binary: serve
	// as the child before any test starts.
	conformance.MaybeRunChild()
	os.Exit(m.Run())
}

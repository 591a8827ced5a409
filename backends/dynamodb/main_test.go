package dynamodb_test

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/conformance"
)

func TestMain(m *testing.M) {
	// The process-freeze check and the torture's child-process worker
	// re-execute this binary: serve as the child before any test starts
	// a server.
	conformance.MaybeRunChild()
	os.Exit(m.Run())
}

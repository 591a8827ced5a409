//go:build !linux

package conformance

// testProcessCrash needs Pdeathsig (Linux) to never leave a child behind;
// elsewhere it reports itself skipped.
func testProcessCrash(t TB, e *env) {
	t.Skipf("the process-crash check runs on Linux only (Pdeathsig)")
}

//go:build !linux

package conformance

// testProcessFreeze needs SIGSTOP and Pdeathsig (Linux); elsewhere it
// reports itself skipped.
func testProcessFreeze(t TB, e *env) {
	t.Skipf("the process-freeze check runs on Linux only (SIGSTOP, Pdeathsig)")
}

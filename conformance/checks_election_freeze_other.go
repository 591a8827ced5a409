//go:build !linux

package conformance

// testElectionProcessFreeze needs SIGSTOP and Pdeathsig (Linux); elsewhere
// it reports itself skipped.
func testElectionProcessFreeze(t TB, e *env) {
	t.Skipf("the leader process-freeze check runs on Linux only (SIGSTOP, Pdeathsig)")
}

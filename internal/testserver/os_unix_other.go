//go:build unix && !linux

package testserver

import "syscall"

// setPdeathsig: no parent-death signal outside Linux; Cleanup kills the
// servers (a crashed test run may leave one running).
func setPdeathsig(*syscall.SysProcAttr) {}

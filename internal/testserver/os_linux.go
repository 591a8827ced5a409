package testserver

import "syscall"

// setPdeathsig has the kernel SIGKILL the child when the test process
// dies, so that no server outlives a crashed test run (Linux only).
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

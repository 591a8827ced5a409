//go:build unix

package testserver

import (
	"os"
	"syscall"
)

// Credential is a user to run a server process as.
type Credential = syscall.Credential

// Signal is a process signal.
type Signal = syscall.Signal

const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
	sigInt  = syscall.SIGINT
)

// signalPID sends sig to one process.
func signalPID(pid int, sig Signal) error { return syscall.Kill(pid, sig) }

// signalGroup sends sig to the process group led by pid.
func signalGroup(pid int, sig Signal) error { return syscall.Kill(-pid, sig) }

// procAttr runs a child as cred (nil: as us), in a process group of its
// own if group, and (on Linux) killed with its parent.
func procAttr(cred *Credential, group bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: group, Credential: cred}
	setPdeathsig(a)
	return a
}

func newCredential(uid, gid uint32) *Credential { return &Credential{Uid: uid, Gid: gid} }

func isRoot() bool { return os.Geteuid() == 0 }

// processAlive reports whether process pid exists (signal 0).
func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

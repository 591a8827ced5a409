//go:build !unix

package testserver

import (
	"errors"
	"os"
	"syscall"
)

// Credential is a user to run a server process as (unused here).
type Credential struct{ Uid, Gid uint32 }

// Signal is a process signal; only sigKill can be delivered here.
type Signal int

const (
	sigStop Signal = iota + 1
	sigCont
	sigTerm
	sigKill
	sigInt
)

// errNoSignals: SIGSTOP, SIGCONT, SIGTERM and SIGINT do not exist here, so
// Pause, Resume and graceful stops are unavailable (Stop kills).
var errNoSignals = errors.New("testserver: process signals (SIGSTOP/SIGCONT/SIGTERM) are only available on Unix")

func signalPID(pid int, sig Signal) error {
	if sig != sigKill {
		return errNoSignals
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

func signalGroup(pid int, sig Signal) error { return signalPID(pid, sig) }

func procAttr(*Credential, bool) *syscall.SysProcAttr { return nil }

func newCredential(uid, gid uint32) *Credential { return &Credential{Uid: uid, Gid: gid} }

func isRoot() bool { return false }

// processAlive reports whether process pid exists, as far as can be told
// here (os.FindProcess).
func processAlive(pid int) bool {
	_, err := os.FindProcess(pid)
	return err == nil
}

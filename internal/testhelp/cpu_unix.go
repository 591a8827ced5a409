//go:build unix

package testhelp

import (
	"syscall"
	"time"
)

// ProcessCPU is this process's user + system CPU time (0 outside Unix,
// where the benchmarks' CPU metrics then read 0).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

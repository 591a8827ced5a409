//go:build !unix

package testhelp

import "time"

// ProcessCPU is not measured outside Unix: it returns 0, and the
// benchmarks' CPU metrics read 0.
func ProcessCPU() time.Duration { return 0 }

//go:build !unix

package pgadvisory_test

import "time"

// processCPU is 0 where getrusage is missing: BenchmarkContended's CPU
// per grant then reads 0.
func processCPU() time.Duration { return 0 }

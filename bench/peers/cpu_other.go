//go:build !linux

package peers

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }

// serverCPU is not measured here.
func serverCPU([]int) (time.Duration, bool) { return 0, false }

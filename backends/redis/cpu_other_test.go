//go:build !unix

package redis_test

import "time"

// processCPU is not measured outside Unix (the CPU overhead metrics read 0).
func processCPU() time.Duration { return 0 }

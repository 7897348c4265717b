//go:build !unix

package store

import "time"

// processCPU is not measured here: benchmarks report 0 CPU.
func processCPU() time.Duration { return 0 }

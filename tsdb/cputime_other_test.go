//go:build !unix

package tsdb

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }

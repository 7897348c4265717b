//go:build !unix

package cputime

import "time"

// Process is not measured on this system: it returns 0, and CPU columns read 0.
func Process() time.Duration { return 0 }

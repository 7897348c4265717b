package main

import (
	"log/slog"
	"os"

	"github.com/tsdht/tsdht/internal/gcfloor"
)

// nodeHeapFloor is the heap goal below which the node's collector does not start a
// cycle while GOGC is not set (docs/deployment.md, "The collector"): a node's live heap
// is a few MiB, and at GOGC's default a burst of requests that allocate, refused or not,
// would start a cycle for every few MiB they allocate, each taking a one-core board's
// CPU from the requests the node serves meanwhile.
const nodeHeapFloor = 24 << 20

// startGCFloor keeps the node's heap goal at nodeHeapFloor while its live heap is small
// (internal/gcfloor), unless GOGC is set: then the operator's setting holds as given. A
// soft memory limit (GOMEMLIMIT) lowers the goal in either case.
func startGCFloor(logger *slog.Logger) (stop func()) {
	if g := os.Getenv("GOGC"); g != "" {
		logger.Info("collector: GOGC as set in the environment", "GOGC", g)
		return func() {}
	}
	return gcfloor.Start(nodeHeapFloor, 100)
}

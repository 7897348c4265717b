package wire

import (
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// PutOptions tune one write.
type PutOptions struct {
	// WriteQuorum overrides the node's write quorum for this write (1..rf; 0 = default).
	WriteQuorum int
	// Quantum is the quantum length a new series gets: its first write fixes it, and a
	// series already written keeps its own. 0 means the cluster's. With FitQuanta a new
	// series gets one chosen from the rate of its points in this write (quanta.Fit), and
	// Quantum only when the write holds a single point of it, which shows no rate.
	Quantum   quanta.Quantum
	FitQuanta bool
}

// GetOptions tune one read.
type GetOptions struct {
	// ReadQuorum overrides how many replicas must agree that a shard is empty (0 = default).
	ReadQuorum int
	// AllowPartial returns what could be read, marked partial, instead of failing when a
	// shard has no reachable replica.
	AllowPartial bool
	// MaxBytes, when not 0, bounds the answer (its points' WireSize): past it the read
	// fails with CodeTooLarge instead of growing, and the caller asks for a shorter
	// range. A node sets it on reads it coordinates for a thin client, whose answer must
	// fit in a frame.
	MaxBytes int
}

// Result is the answer to a read.
type Result struct {
	Points series.Points
	// Partial is set when Missing shards could not be read from any replica; it can be
	// set only with GetOptions.AllowPartial.
	Partial bool
	Missing int
}

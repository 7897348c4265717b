package wire

import "github.com/tsdht/tsdht/tsdb/series"

// PutOptions tune one write.
type PutOptions struct {
	// WriteQuorum overrides the node's write quorum for this write (1..rf; 0 = default).
	WriteQuorum int
}

// GetOptions tune one read.
type GetOptions struct {
	// ReadQuorum overrides how many replicas must agree that a shard is empty (0 = default).
	ReadQuorum int
	// AllowPartial returns what could be read, marked partial, instead of failing when a
	// shard has no reachable replica.
	AllowPartial bool
}

// Result is the answer to a read.
type Result struct {
	Points series.Points
	// Partial is set when Missing shards could not be read from any replica; it can be
	// set only with GetOptions.AllowPartial.
	Partial bool
	Missing int
}

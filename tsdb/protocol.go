package tsdb

import (
	"github.com/tsdht/tsdht/tsdb/coord"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The protocol's types live in package wire; these names keep the node's API whole.
type (
	// PutOptions tune one write (wire.PutOptions).
	PutOptions = wire.PutOptions
	// GetOptions tune one read (wire.GetOptions).
	GetOptions = wire.GetOptions
	// Result is the answer to a read (wire.Result).
	Result = wire.Result
	// PeerInfo describes a node to clients (wire.PeerInfo).
	PeerInfo = wire.PeerInfo
	// NodeStats is what one node reports about itself (wire.NodeStats).
	NodeStats = wire.NodeStats
	// RepairStats is the repairer's progress, reported by status (wire.RepairStats).
	RepairStats = wire.RepairStats
)

// Error codes carried in rpc.RemoteError: see package wire.
const (
	CodeBadInput      = wire.CodeBadInput
	CodeTypeMismatch  = wire.CodeTypeMismatch
	CodeUnknownSeries = wire.CodeUnknownSeries
	CodeUnavailable   = wire.CodeUnavailable
	CodePartial       = wire.CodePartial
	CodeTooLarge      = wire.CodeTooLarge
	CodeExpired       = wire.CodeExpired
	CodeTooManySeries = wire.CodeTooManySeries
	CodeSlowDown      = wire.CodeSlowDown
)

// The coordinator's types live in package coord; these names keep the node's API whole.
type (
	// Coordinator writes and reads series for clients (coord.Coordinator).
	Coordinator = coord.Coordinator
	// SeriesPut is the points of one series in a PutMany (coord.SeriesPut).
	SeriesPut = coord.SeriesPut
	// SeriesResult is what PutMany did with one series (coord.SeriesResult).
	SeriesResult = coord.SeriesResult
	// PutResult says what a write did (coord.PutResult).
	PutResult = coord.PutResult
	// SeriesRange is one series and range of a GetMany or AggregateMany (coord.SeriesRange).
	SeriesRange = coord.SeriesRange
	// Listed is a series' catalog entry as a listing read it (coord.Listed).
	Listed = coord.Listed
	// BudgetError is a write refused by the new-series budget (coord.BudgetError).
	BudgetError = coord.BudgetError
)

// MaxAggWindows is the most windows one aggregate answers (coord.MaxAggWindows).
const MaxAggWindows = coord.MaxAggWindows

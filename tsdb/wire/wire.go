// Package wire is tsdht's protocol between nodes and between clients and nodes: the RPC
// method names, their request and response messages, and the error codes a node answers
// with. Any package that speaks to a node (the thin client, an HTTP gateway, an ingester)
// uses these types with package rpc; it needs nothing else of the node.
//
// Messages are msgpack maps keyed by short names, so that a field can be added without
// breaking older peers (as_array structs cannot be versioned): a cluster can run two
// versions at once during a rolling upgrade. The names are the protocol; never reuse or
// rename one. The write path's WriteReq and WriteResp are encoded and decoded by hand
// (writecodec.go), byte for byte as msgpack/v5 would, and fuzzed against it.
//
// Two levels of methods exist. Replica methods move shards and series metadata between
// a coordinating node and the nodes that store them. Coordinator methods let a thin
// client have any node coordinate a read or a write for it.
package wire

// Replica methods: what a coordinator or repairer asks of one replica.
const (
	// MethodWrite stores shards on a replica: WriteReq → WriteResp. Idempotent: points
	// already held are merged, so a retried or repeated write is harmless.
	MethodWrite = "tsdb.write"
	// MethodRead reads shards, or only their digests, from a replica: ReadReq → ReadResp.
	MethodRead = "tsdb.read"
	// MethodDeclare fixes a series' type at one of its registry replicas: TypeReq →
	// TypeResp, or CodeTypeMismatch if the series holds another type.
	MethodDeclare = "tsdb.declare"
	// MethodType asks a registry replica for a series' type: TypeReq (Type unused) →
	// TypeResp.
	MethodType = "tsdb.type"
	// MethodStats asks a node for its own counters: an empty map → NodeStats.
	MethodStats = "tsdb.stats"
)

// Coordinator methods: what a thin client asks of any node.
const (
	// MethodPut coordinates a write: PutReq → PutResp.
	MethodPut = "tsdb.put"
	// MethodGet coordinates a read: GetReq → GetResp.
	MethodGet = "tsdb.get"
	// MethodStatus lists the cluster's members and their counters as the node sees
	// them: an empty map → StatusResp.
	MethodStatus = "tsdb.status"
	// MethodLocate lists a shard's replica set, closest first: LocateReq → LocateResp.
	MethodLocate = "tsdb.locate"
	// MethodDecommission has a node hand every shard it holds to the shards' other
	// owners and then leave the cluster for good: DecommissionReq → DecommissionResp.
	// The node asked forwards the request to the node named when that is another.
	MethodDecommission = "tsdb.decommission"
)

// Error codes carried in rpc.RemoteError.Code, so that a caller can tell a user's mistake
// from a cluster fault.
const (
	// CodeBadInput: the request is malformed or out of limits; the message says what to
	// fix. Retrying it unchanged fails again.
	CodeBadInput = "bad_input"
	// CodeTypeMismatch: the series holds values of another type; write it as that type
	// or under another key.
	CodeTypeMismatch = "type_mismatch"
	// CodeUnknownSeries: no point of the series was ever stored.
	CodeUnknownSeries = "unknown_series"
	// CodeUnavailable: too few replicas could be reached for the quorum; retry later,
	// or lower the quorum.
	CodeUnavailable = "unavailable"
	// CodePartial: some shard of a read could not be read from any replica; retry, or
	// ask with AllowPartial for what could be read.
	CodePartial = "partial"
	// CodeExpired: the write falls in a quantum past the node's retention; it is refused.
	CodeExpired = "expired"
	// CodeTooLarge: the answer to a read would not fit in a frame (a shard of long
	// strings), or an aggregate would hold more than MaxAggWindows windows; ask for a
	// shorter range or wider windows (the thin client halves its window).
	CodeTooLarge = "too_large"
	// CodeTooManySeries: a write names more series its coordinator does not know yet
	// than it takes in one write (its new-series budget); nothing of it was stored.
	// Split it into writes of fewer new series.
	CodeTooManySeries = "too_many_series"
	// CodeSlowDown: a write would take its coordinator past its budget of new series
	// per second; nothing of it was stored. Retry it after the pause the message names.
	CodeSlowDown = "slow_down"
	// CodeDiskFull: a replica's disk is full (below its reserve, or its engine failed a
	// write for want of space): it refuses writes and keeps serving reads. Retrying
	// soon does not help; space freed on that node (by an operator, --max-disk,
	// --retention) does.
	CodeDiskFull = "disk_full"
)

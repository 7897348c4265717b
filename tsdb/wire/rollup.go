package wire

// Rollup methods (package tsdb/rollup, docs/rollups.md). A series' rollup homes are its
// registry replicas; they pull per-quantum statistics from the raw owners with
// MethodAgg and answer coordinators with windows of a rollup level.
const (
	// MethodRollupMark marks a series' rollup windows dirty at one of its homes, after
	// a late write or a delete reached its replicas: RollupMarkReq → RollupMarkResp.
	MethodRollupMark = "tsdb.rollup.mark"
	// MethodRollupRead asks a home for a series' windows of one level over a range:
	// RollupReadReq → RollupReadResp.
	MethodRollupRead = "tsdb.rollup.read"
)

// Limits of the rollup messages, checked by senders and receivers.
const (
	// MaxRollupMarks bounds the windows of one RollupMarkReq; a write touching more
	// late windows sends a range instead (From, To).
	MaxRollupMarks = 4096
	// MaxRollupReadWindows bounds the windows one RollupReadReq covers: (To − From) /
	// Width. A coordinator asks for longer ranges in parts.
	MaxRollupReadWindows = 1 << 16
)

// RollupMarkReq marks dirty, at a home of Key, the finest-level windows starting at
// Starts (ns) and, when From < To, every window meeting [From, To). Reset drops what
// the home holds of the series (the series was deleted).
type RollupMarkReq struct {
	Key    string  `msgpack:"k"`
	Starts []int64 `msgpack:"s"`
	From   int64   `msgpack:"f"`
	To     int64   `msgpack:"t"`
	Reset  bool    `msgpack:"r"`
}

// RollupMarkResp acknowledges a RollupMarkReq. Quiet (ns), when positive, is the home's
// promise that it holds nothing of the series and that no pull of it will start
// within Quiet of this answer: a coordinator may skip marking the series' later late
// points at this home until then (docs/rollups.md, "Late writes mark dirty").
type RollupMarkResp struct {
	Quiet int64 `msgpack:"q,omitempty"`
}

// RollupReadReq asks a home for the windows of width Width (one of its levels, ns)
// over From <= t < To, both multiples of Width. With Digests the home answers each
// window's count and digest only (RollupReadResp.Digests): what a coordinator asks of
// every home but the one whose windows it uses, to check that they agree.
type RollupReadReq struct {
	Key     string `msgpack:"k"`
	Width   int64  `msgpack:"w"`
	From    int64  `msgpack:"f"`
	To      int64  `msgpack:"t"`
	Digests bool   `msgpack:"d,omitempty"`
}

// RollupReadResp answers a RollupReadReq. Known lists, ascending, the ranges [lo, hi)
// (pairs of ns) whose every window the home holds settled: a window inside them is
// either in Packed or holds no point. Packed holds the known non-empty windows
// (agg.AppendWindowsWire), each Partial's Hash the window's digest: two homes with
// equal digests hold the same statistics of the same points. Asked for Digests, the
// home leaves Packed empty and lists the same windows in Digests
// (agg.AppendDigestsWire): start, count and digest, without their statistics.
type RollupReadResp struct {
	Known   []int64 `msgpack:"k"`
	Packed  []byte  `msgpack:"w"`
	Digests []byte  `msgpack:"g,omitempty"`
}

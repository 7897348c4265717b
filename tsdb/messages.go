package tsdb

import (
	"github.com/tsdht/tsdht/tsdb/series"
)

// RPC method names. Replica-level methods move shards between a coordinator and the
// nodes that store them; coordinator-level methods let a thin client drive any node.
const (
	methodWrite   = "tsdb.write"   // store shards on this replica
	methodRead    = "tsdb.read"    // read shards (or their digests) from this replica
	methodDeclare = "tsdb.declare" // fix a series' type in this registry replica
	methodType    = "tsdb.type"    // a series' type as this registry replica knows it
	methodStats   = "tsdb.stats"   // this node's own counters
	methodPut     = "tsdb.put"     // coordinate a write
	methodGet     = "tsdb.get"     // coordinate a read
	methodStatus  = "tsdb.status"  // the cluster as this node sees it
	methodLocate  = "tsdb.locate"  // a shard's replica set
)

// Error codes carried in rpc.RemoteError, so that clients can tell a user's mistake from
// a cluster fault.
const (
	CodeBadInput      = "bad_input"
	CodeTypeMismatch  = "type_mismatch"
	CodeUnknownSeries = "unknown_series"
	CodeUnavailable   = "unavailable"
	CodePartial       = "partial"
	CodeExpired       = "expired" // the write falls in a quantum past the retention
)

// Messages are msgpack maps keyed by short names, so a field can be added without
// breaking older peers (as_array structs cannot be versioned).

type shardWrite struct {
	ID     []byte        `msgpack:"id"`
	Start  int64         `msgpack:"q"`
	Key    string        `msgpack:"k"`
	Points series.Points `msgpack:"p"`
}

type writeReq struct {
	Shards []shardWrite `msgpack:"s"`
}

type writeResp struct {
	Stored int `msgpack:"n"`
}

type shardRead struct {
	ID     []byte `msgpack:"id"`
	Start  int64  `msgpack:"q"`
	Key    string `msgpack:"k"`
	From   int64  `msgpack:"f"`
	To     int64  `msgpack:"t"`
	Digest bool   `msgpack:"d"`  // only count and hash, not the points
	Strong bool   `msgpack:"sd"` // hash the points even for a whole quantum (anti-entropy)
	// Packed asks for the points in shardResult.Packed (series.AppendPacked: ~2 bytes a
	// PMU point instead of 12). A replica that predates it ignores the field and answers
	// in Points, which a reader also takes.
	Packed bool `msgpack:"pk,omitempty"`
}

type readReq struct {
	Shards []shardRead `msgpack:"s"`
}

// shardResult answers one shardRead. Held is false when the replica has never received
// the shard: a new owner's honest "nothing here", which a reader must not trust alone.
type shardResult struct {
	Held   bool          `msgpack:"h"`
	Count  int           `msgpack:"c"`
	Hash   uint64        `msgpack:"x"`
	Points series.Points `msgpack:"p"`
	Packed []byte        `msgpack:"pp,omitempty"` // the points, packed, when the read asked so
}

// unpack moves packed points into Points.
func (r *shardResult) unpack() error { return unpackInto(&r.Points, &r.Packed) }

// unpack moves packed points into Points.
func (r *getResp) unpack() error { return unpackInto(&r.Points, &r.Packed) }

// unpackInto decodes *packed, if any, into *pts and clears it: an answer carries its
// points in one form or the other (shardRead.Packed).
func unpackInto(pts *series.Points, packed *[]byte) error {
	if len(*packed) == 0 {
		return nil
	}
	p, err := series.DecodePacked(*packed)
	if err != nil {
		return err
	}
	*pts, *packed = p, nil
	return nil
}

type readResp struct {
	Shards []shardResult `msgpack:"s"`
}

type typeReq struct {
	Key  string      `msgpack:"k"`
	Type series.Type `msgpack:"t"`
}

type typeResp struct {
	Known bool        `msgpack:"ok"`
	Type  series.Type `msgpack:"t"`
}

type putReq struct {
	Key         string        `msgpack:"k"`
	Points      series.Points `msgpack:"p"`
	WriteQuorum int           `msgpack:"w"`
}

type putResp struct {
	Stored int `msgpack:"n"`
}

type getReq struct {
	Key          string `msgpack:"k"`
	From         int64  `msgpack:"f"`
	To           int64  `msgpack:"t"`
	ReadQuorum   int    `msgpack:"r"`
	AllowPartial bool   `msgpack:"partial"`
	Packed       bool   `msgpack:"pk,omitempty"` // answer in getResp.Packed (see shardRead.Packed)
}

type getResp struct {
	Points  series.Points `msgpack:"p"`
	Packed  []byte        `msgpack:"pp,omitempty"` // the points, packed, when the get asked so
	Partial bool          `msgpack:"partial"`
	Missing int           `msgpack:"missing"` // shards no replica could serve
}

type locateReq struct {
	ID []byte `msgpack:"id"`
}

type locateResp struct {
	Replicas []PeerInfo `msgpack:"r"`
}

// PeerInfo describes a node to clients.
type PeerInfo struct {
	PeerID  string `msgpack:"pid"`
	NodeID  string `msgpack:"id"` // 160-bit ID, 40 hex digits
	RPCAddr string `msgpack:"rpc"`
	State   string `msgpack:"state"`
}

// NodeStats is what one node reports about itself.
type NodeStats struct {
	PeerInfo
	Shards    int         `msgpack:"shards"`
	Series    int         `msgpack:"series"`
	Points    int64       `msgpack:"points"`
	Format    string      `msgpack:"fmt"`
	Quantum   int64       `msgpack:"quantum"`
	RF        int         `msgpack:"rf"`
	Error     string      `msgpack:"err"` // why the stats could not be fetched
	Reachable bool        `msgpack:"reach"`
	Repair    RepairStats `msgpack:"repair"`
	DiskBytes int64       `msgpack:"disk"`
	Retention string      `msgpack:"retention"` // "0s": keep everything
	MaxDisk   int64       `msgpack:"maxdisk"`
	Oldest    int64       `msgpack:"oldest"`  // start of the oldest quantum held, UNIX s
	Dropped   int64       `msgpack:"dropped"` // quanta dropped by retention or budget
}

type statusResp struct {
	Nodes []NodeStats `msgpack:"nodes"`
}

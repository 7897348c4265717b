package wire

import (
	"fmt"

	"github.com/tsdht/tsdht/tsdb/series"
)

// ShardWrite is the points of one series in one shard.
type ShardWrite struct {
	ID    []byte `msgpack:"id"` // the shard ID: quanta.ShardID of Key and Start
	Start int64  `msgpack:"q"`  // the quantum's start, UNIX seconds
	// Q is the quantum's length in seconds, the series' own; 0 is the cluster's.
	Q      int64         `msgpack:"ql,omitempty"`
	Key    string        `msgpack:"k"`
	Points series.Points `msgpack:"p"`
	// Deleted is, in a Repair write, the sender's tombstones of the pair: its points
	// inside them were written after the delete (see WriteReq.Repair).
	Deleted []Range `msgpack:"del,omitempty"`
}

// WriteReq asks a replica to store shards (MethodWrite).
type WriteReq struct {
	Shards []ShardWrite `msgpack:"s"`
	// Repair marks points sent by another replica (anti-entropy, hinted hand-off, read
	// repair): the replica drops those its tombstones cover and answers with the
	// tombstones, so that the sender deletes them too (docs/catalog.md).
	Repair bool `msgpack:"rp,omitempty"`
	// Keep, in a Repair write, keeps the value the replica holds at a timestamp the
	// write carries too: the write fills only what the replica lacks, and the answer
	// counts the timestamps held with another value (WriteResp.Conflicts). Points carry
	// no write version: a copy read before a write reached its sender must not replace
	// that write where it has already landed (store.RestoreOptions.KeepHeld).
	Keep bool `msgpack:"kp,omitempty"`
}

// WriteResp says how many points a replica stored.
type WriteResp struct {
	Stored int `msgpack:"n"`
	// Deleted lists, for a Repair write, the tombstones of the shards that have some.
	Deleted []ShardRanges `msgpack:"del,omitempty"`
	// Conflicts lists, for a Keep write, the indexes in WriteReq.Shards of the shards
	// whose replica held another value than the write's at one of its timestamps, and
	// kept it.
	Conflicts []int `msgpack:"c,omitempty"`
}

// ShardRanges names the deleted ranges of WriteReq.Shards[Index].
type ShardRanges struct {
	Index  int     `msgpack:"i"`
	Ranges []Range `msgpack:"r"`
}

// ShardRead asks for the points of one series in one shard with From <= t < To.
type ShardRead struct {
	ID    []byte `msgpack:"id"`
	Start int64  `msgpack:"q"`
	// Q is the quantum's length in seconds, the series' own; 0 is the cluster's.
	Q      int64  `msgpack:"ql,omitempty"`
	Key    string `msgpack:"k"`
	From   int64  `msgpack:"f"`
	To     int64  `msgpack:"t"`
	Digest bool   `msgpack:"d"`  // only count and hash, not the points
	Strong bool   `msgpack:"sd"` // hash the points even for a whole quantum (anti-entropy)
	// Packed asks for the points in ShardResult.Packed (series.AppendPacked: ~2 bytes a
	// PMU point instead of 12). A replica that predates it ignores the field and answers
	// in Points, which a reader also takes.
	Packed bool `msgpack:"pk,omitempty"`
	// PackedVersion, with Packed, is the newest packed form the reader decodes
	// (series.PackedVersion); 0 means 1. A replica answers in the smallest form up to
	// it (series.AppendPackedFor); one that predates the field answers in version 1.
	PackedVersion int `msgpack:"pv,omitempty"`
	// SetHash, with Digest, asks for the pair's set hash instead: agg.Partial.Hash of all
	// its points (order-independent, kept by the store's statistics on every write, so a
	// replica answers without reading points), From and To ignored. A replica that
	// answers so sets ShardResult.SetHash; one that predates the field answers as for
	// Strong, and the asker compares with that instead.
	SetHash bool `msgpack:"sh,omitempty"`
}

// ReadReq asks a replica for shards or their digests (MethodRead).
type ReadReq struct {
	Shards []ShardRead `msgpack:"s"`
}

// ReadResp answers a ReadReq, one ShardResult per ShardRead, in order.
type ReadResp struct {
	Shards []ShardResult `msgpack:"s"`
}

// ShardResult answers one ShardRead. Held is false when the replica has never received
// the shard: a new owner's honest "nothing here", which a reader must not trust alone.
type ShardResult struct {
	Held   bool          `msgpack:"h"`
	Count  int           `msgpack:"c"`
	Hash   uint64        `msgpack:"x"`
	Points series.Points `msgpack:"p"`
	Packed []byte        `msgpack:"pp,omitempty"` // the points, packed, when the read asked so
	// Deleted is the replica's tombstones of the pair: a reader drops the points they
	// cover from every replica's answer, so a replica that missed a delete cannot show
	// deleted points.
	Deleted []Range `msgpack:"del,omitempty"`
	// SetHash says Hash is the pair's set hash (ShardRead.SetHash).
	SetHash bool `msgpack:"sh,omitempty"`
}

// Unpack moves packed points into Points.
func (r *ShardResult) Unpack() error { return unpackInto(&r.Points, &r.Packed) }

// TypeReq names a series, and for MethodDeclare the type to fix.
type TypeReq struct {
	Key  string      `msgpack:"k"`
	Type series.Type `msgpack:"t"`
	// Quantum, for MethodDeclare, is the quantum length (seconds) to fix if the series
	// has none yet; 0 is the cluster's. NoQuantum declares the type alone.
	Quantum   int64 `msgpack:"qn,omitempty"`
	NoQuantum bool  `msgpack:"nq,omitempty"`
}

// TypeResp is a series' type as a registry replica knows it; Known is false when the
// replica has never heard of the series.
type TypeResp struct {
	Known bool        `msgpack:"ok"`
	Type  series.Type `msgpack:"t"`
	// Quantum is the series' quantum length in seconds, 0 the cluster's; NoQuantum says
	// the replica does not know it (an append, not a declaration, told it the series).
	Quantum   int64 `msgpack:"qn,omitempty"`
	NoQuantum bool  `msgpack:"nq,omitempty"`
}

// PutReq asks a node to coordinate a write (MethodPut).
type PutReq struct {
	Key         string        `msgpack:"k"`
	Points      series.Points `msgpack:"p"`
	WriteQuorum int           `msgpack:"w"` // 0: the node's default
	// Quantum is the quantum length (seconds) a new series gets (PutOptions.Quantum);
	// FitQuanta chooses it from the points' rate (PutOptions.FitQuanta).
	Quantum   int64 `msgpack:"qn,omitempty"`
	FitQuanta bool  `msgpack:"fq,omitempty"`
}

// PutResp says how many points reached their write quorum.
type PutResp struct {
	Stored int `msgpack:"n"`
	// WaitedMillis is how long the coordinator retried shards whose replicas had failed
	// (until failure detection took them out of placement); 0 when it did not wait.
	WaitedMillis int64 `msgpack:"waited,omitempty"`
}

// GetReq asks a node to coordinate a read of From <= t < To (MethodGet).
type GetReq struct {
	Key          string `msgpack:"k"`
	From         int64  `msgpack:"f"`
	To           int64  `msgpack:"t"`
	ReadQuorum   int    `msgpack:"r"` // 0: the node's default
	AllowPartial bool   `msgpack:"partial"`
	Packed       bool   `msgpack:"pk,omitempty"` // answer in GetResp.Packed (see ShardRead.Packed)
	// PackedVersion is the newest packed form the asker decodes; 0 means 1 (see
	// ShardRead.PackedVersion).
	PackedVersion int  `msgpack:"pv,omitempty"`
	Entry         bool `msgpack:"e,omitempty"` // answer the series' catalog entry too
	// Parts, with Packed, asks for the points in GetResp.Parts: each shard's packed
	// answer forwarded as its replica sent it, where the coordinator had nothing to
	// merge, instead of decoded, joined and packed again. A node that predates the
	// field answers in Packed.
	Parts bool `msgpack:"pa,omitempty"`
}

// GetResp answers a GetReq.
type GetResp struct {
	Points  series.Points `msgpack:"p"`
	Packed  []byte        `msgpack:"pp,omitempty"` // the points, packed, when the get asked so
	Partial bool          `msgpack:"partial"`
	Missing int           `msgpack:"missing"`     // shards no replica could serve
	Entry   []byte        `msgpack:"e,omitempty"` // the catalog entry, when asked (catalog.Entry.Encode)
	// Parts holds the points, when the get asked so (GetReq.Parts) and there are any,
	// as packed runs in time order (each in a form up to GetReq.PackedVersion); Packed
	// then only says the series' type.
	Parts [][]byte `msgpack:"pa,omitempty"`
}

// Unpack moves packed points, in Parts or Packed, into Points. Parts must decode to
// points of one type in time order, each run after the one before it.
func (r *GetResp) Unpack() error {
	if len(r.Parts) == 0 {
		return unpackInto(&r.Points, &r.Packed)
	}
	runs := make([]series.Points, 0, len(r.Parts))
	for i, b := range r.Parts {
		p, err := series.DecodePacked(b)
		if err != nil {
			return fmt.Errorf("part %d of %d: %w", i, len(r.Parts), err)
		}
		if p.Len() == 0 {
			continue
		}
		if k := len(runs); k > 0 {
			prev := &runs[k-1]
			if p.Type != prev.Type {
				return fmt.Errorf("part %d of %d holds %s points after %s ones", i, len(r.Parts), p.Type, prev.Type)
			}
			if p.T[0] <= prev.T[prev.Len()-1] {
				return fmt.Errorf("part %d of %d starts at %d, not after the part before it (%d)", i, len(r.Parts), p.T[0], prev.T[prev.Len()-1])
			}
		}
		runs = append(runs, p)
	}
	r.Points, r.Parts, r.Packed = series.Concat(runs...), nil, nil
	return nil
}

// unpackInto decodes *packed, if any, into *pts and clears it: an answer carries its
// points in one form or the other (ShardRead.Packed).
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

// LocateReq asks for a shard's replica set (MethodLocate).
type LocateReq struct {
	ID []byte `msgpack:"id"` // a 20-byte shard ID
	// Trace asks the node to find the set afresh, bypassing its cache, and to list
	// how: in kademlia routing mode the iterative lookup's requests.
	Trace bool `msgpack:"trace,omitempty"`
}

// LocateResp lists a shard's replicas, closest first.
type LocateResp struct {
	Replicas []PeerInfo `msgpack:"r"`
	Routing  string     `msgpack:"routing,omitempty"` // the node's routing mode: full or kademlia
	Hops     []Hop      `msgpack:"hops,omitempty"`    // with Trace, in kademlia mode
}

// Hop is one FIND_NODE request of a traced lookup.
type Hop struct {
	Round    int      `msgpack:"round"` // from 1
	Peer     PeerInfo `msgpack:"peer"`
	Distance string   `msgpack:"dist"`          // XOR distance of the peer to the ID, 40 hex digits
	Returned int      `msgpack:"returned"`      // peers it answered with
	Err      string   `msgpack:"err,omitempty"` // why it failed
}

// DecommissionReq names the node to decommission by its 160-bit ID (40 hex digits,
// as status prints it).
type DecommissionReq struct {
	NodeID string `msgpack:"id"`
}

// DecommissionResp says what the hand-off moved. StillHeld is the number of (shard,
// series) pairs the node could not hand off (an owner unreachable): the node then
// stays a member, and the request can be repeated.
type DecommissionResp struct {
	NodeID      string `msgpack:"id"`
	PushedPairs int64  `msgpack:"pushed"`
	HandedOff   int64  `msgpack:"handed"`
	StillHeld   int    `msgpack:"held"`
}

// StatusResp lists every member a node knows (MethodStatus), by NodeID.
type StatusResp struct {
	Nodes []NodeStats `msgpack:"nodes"`
	// Routing is the answering node's routing mode. In kademlia mode Nodes are what
	// that node knows, its routing table and itself, not the whole cluster.
	Routing string `msgpack:"routing,omitempty"`
}

// MaxReadAnswerBytes bounds the points one replica read answers with (their WireSize),
// inside an RPC frame (4 MiB) with room for the envelope.
const MaxReadAnswerBytes = 3 << 20

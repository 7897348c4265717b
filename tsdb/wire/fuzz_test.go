package wire

import (
	"github.com/tsdht/tsdht/tsdb/catalog"
	"runtime"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// messages are a fresh value of every message a node decodes from the network.
func messages() []any {
	return []any{&WriteReq{}, &WriteResp{}, &ReadReq{}, &ReadResp{}, &TypeReq{}, &TypeResp{},
		&PutReq{}, &PutResp{}, &GetReq{}, &GetResp{}, &LocateReq{}, &LocateResp{},
		&DecommissionReq{}, &DecommissionResp{}, &StatusResp{}, &NodeStats{}, &AggSeriesReq{}, &AggSeriesResp{},
		&RollupMarkReq{}, &RollupMarkResp{}, &RollupReadReq{}, &RollupReadResp{}, &KeysReq{}, &TypesResp{}, &ShapeReq{}, &ShapeResp{},
		&CatalogMergeReq{}, &ListingReq{}, &ListingResp{}}
}

func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// FuzzDecodeMessages decodes any bytes as every wire message, as a node's handlers do
// (rpc.Decode: declared lengths checked, the cost of what would be allocated bounded
// before decoding), and asserts that no message costs more than a small constant
// times the bytes received: a hostile peer pays for what it makes a node allocate.
func FuzzDecodeMessages(f *testing.F) {
	var pts series.Points
	pts.AppendFloat(1, 2)
	for _, m := range []any{
		&WriteReq{Shards: []ShardWrite{{ID: make([]byte, 20), Start: 10, Key: "k", Points: pts}}},
		&ReadReq{Shards: []ShardRead{{ID: make([]byte, 20), Key: "k", From: 1, To: 2, Digest: true}}},
		&ReadResp{Shards: []ShardResult{{Held: true, Count: 1, Points: pts}}},
		&PutReq{Key: "k", Points: pts}, &GetReq{Key: "k", To: 5}, &GetResp{Packed: []byte{1, 2}},
		&StatusResp{Nodes: []NodeStats{{Shards: 1}}}, &DecommissionReq{NodeID: "ab"},
		&RollupMarkReq{Key: "k", Starts: []int64{60e9, 120e9}}, &RollupReadReq{Key: "k", Width: 60e9, To: 120e9},
		&RollupReadResp{Known: []int64{0, 60e9}, Packed: []byte{1, 2}},
		EncodeListingReq([]catalog.Query{{Prefix: "db/m", Match: []catalog.Tag{{K: "host", V: "a"}}}}),
		&ListingResp{Pages: []ListingPage{{K: "host", V: "a", Limit: 256, Members: []Member{{Key: "db/m#f", Version: 1}}}}, Covered: []string{"db/m#f"}},
		&KeysReq{Keys: []string{"a", "b"}}, &TypesResp{Decls: []TypeResp{{Known: true, Type: series.Float, Quantum: 60}}},
	} {
		b, err := msgpack.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// A map of 1,000 nils under the shards of each request: the shape of finding 2.
	nils := []byte{0x81, 0xa1, 's', 0xdc, 0x03, 0xe8}
	for range 1000 {
		nils = append(nils, 0xc0)
	}
	f.Add(nils)
	f.Fuzz(func(t *testing.T, b []byte) {
		limit := uint64(3*rpc.DecodeCostFactor*len(b) + 64<<10)
		for _, m := range messages() {
			var err error
			grew := allocated(func() { err = rpc.Decode(b, m) })
			if grew > limit {
				t.Fatalf("decoding %d bytes as %T allocated %d bytes, over %d (err %v)", len(b), m, grew, limit, err)
			}
		}
	})
}

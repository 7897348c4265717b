package wire

import (
	"bytes"
	"math"
	"math/rand"
	"reflect"
	"testing"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// randomWriteReq makes a write request of every shape the write path sends: float
// and int points, one or many, keys short and long, starts of every integer size.
func randomWriteReq(rnd *rand.Rand) *WriteReq {
	req := &WriteReq{Repair: rnd.Intn(4) == 0}
	starts := []int64{0, 1, 127, 128, 255, 256, 65535, 65536, 1563703200, math.MaxInt64, -1, -32, -33, -128, -129, -40000, -3e9, math.MinInt64}
	for range rnd.Intn(20) + 1 {
		var pts series.Points
		t := rnd.Int63n(2e18) - 1e18
		n := rnd.Intn(300) + 1
		if rnd.Intn(20) == 0 {
			n = 0
		}
		isInt := rnd.Intn(3) == 0
		for range n {
			t += rnd.Int63n(1e9) + 1
			if isInt {
				pts.AppendInt(t, rnd.Int63()-rnd.Int63())
			} else {
				pts.AppendFloat(t, rnd.NormFloat64()*1e6)
			}
		}
		id := make([]byte, 20)
		rnd.Read(id)
		if rnd.Intn(10) == 0 {
			id = nil
		}
		key := make([]byte, rnd.Intn(300)+1)
		for i := range key {
			key[i] = byte('a' + rnd.Intn(26))
		}
		req.Shards = append(req.Shards, ShardWrite{ID: id, Start: starts[rnd.Intn(len(starts))], Q: int64(rnd.Intn(3)) * 3600, Key: string(key), Points: pts})
	}
	return req
}

// TestWriteReqCodecMatchesReflection: the hand-written encoding is msgpack/v5's byte
// for byte, and the hand-written decoding of it equals rpc.Decode's.
func TestWriteReqCodecMatchesReflection(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	for i := range 500 {
		req := randomWriteReq(rnd)
		want, err := rpc.Encode(req)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := AppendWriteReq(nil, req)
		if !ok {
			t.Fatalf("case %d: AppendWriteReq refused a request without tombstones", i)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: hand-written encoding differs from msgpack/v5's:\n got %x\nwant %x", i, got, want)
		}
		var fast, slow WriteReq
		if !ReadWriteReq(got, &fast) {
			t.Fatalf("case %d: ReadWriteReq refused what AppendWriteReq wrote", i)
		}
		if err := rpc.Decode(got, &slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("case %d: ReadWriteReq = %+v, rpc.Decode = %+v", i, fast, slow)
		}
		if fast.Repair != req.Repair || len(fast.Shards) != len(req.Shards) {
			t.Fatalf("case %d: decoded %d shards repair %v, sent %d repair %v", i, len(fast.Shards), fast.Repair, len(req.Shards), req.Repair)
		}
	}
}

// TestWriteReqCodecFallsBack: what the hand-written codec does not write (tombstones)
// and what it does not read (an unknown field, a string series) go the general way,
// with the same result.
func TestWriteReqCodecFallsBack(t *testing.T) {
	var pts series.Points
	pts.AppendFloat(5, 1.5)
	req := &WriteReq{Repair: true, Shards: []ShardWrite{{ID: make([]byte, 20), Start: 10, Key: "k", Points: pts, Deleted: []Range{{From: 1, To: 2}}}}}
	if _, ok := AppendWriteReq(nil, req); ok {
		t.Fatal("AppendWriteReq wrote tombstones by hand")
	}
	b, err := EncodeWriteReq(req)
	if err != nil {
		t.Fatal(err)
	}
	var fast, got WriteReq
	if ReadWriteReq(b, &fast) {
		t.Fatal("ReadWriteReq took a request with tombstones")
	}
	if err := DecodeWriteReq(b, &got); err != nil || !reflect.DeepEqual(got.Shards[0].Deleted, req.Shards[0].Deleted) {
		t.Fatalf("DecodeWriteReq = %+v, %v", got, err)
	}
	var s series.Points
	s.AppendString(5, "x")
	b, _ = rpc.Encode(&WriteReq{Shards: []ShardWrite{{ID: []byte{1}, Key: "k", Points: s}}})
	if ReadWriteReq(b, &fast) {
		t.Fatal("ReadWriteReq took string points, which it does not read")
	}
	if err := DecodeWriteReq(b, &got); err != nil || got.Shards[0].Points.S[0] != "x" {
		t.Fatalf("DecodeWriteReq of string points = %+v, %v", got, err)
	}
	if err := DecodeWriteReq([]byte{0x81, 0xa1, 's', 0xdc, 0xff, 0xff}, &got); err == nil {
		t.Fatal("DecodeWriteReq took an array that declares more shards than there are bytes")
	}
}

func TestWriteRespCodec(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 1 << 20, math.MaxInt32} {
		resp := &WriteResp{Stored: n}
		want, _ := rpc.Encode(resp)
		got, ok := AppendWriteResp(nil, resp)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("Stored %d: hand-written %x, msgpack/v5 %x", n, got, want)
		}
		var back WriteResp
		if !ReadWriteResp(got, &back) || back.Stored != n {
			t.Fatalf("Stored %d read back as %+v", n, back)
		}
	}
	withDel := &WriteResp{Stored: 1, Deleted: []ShardRanges{{Index: 0, Ranges: []Range{{From: 1, To: 2}}}}}
	b, err := EncodeWriteResp(withDel)
	if err != nil {
		t.Fatal(err)
	}
	var back WriteResp
	if ReadWriteResp(b, &back) {
		t.Fatal("ReadWriteResp took tombstones")
	}
	if err := DecodeWriteResp(b, &back); err != nil || !reflect.DeepEqual(back, *withDel) {
		t.Fatalf("DecodeWriteResp = %+v, %v", back, err)
	}
}

// FuzzReadWriteReq: whatever bytes the hand-written reader takes, rpc.Decode (which
// validates every length and bounds what it allocates) takes too, with the same
// result; and the reader allocates within rpc.DecodeCostFactor bytes per byte read.
func FuzzReadWriteReq(f *testing.F) {
	var pts, ints series.Points
	pts.AppendFloat(1563703200e9, 49.98)
	ints.AppendInt(-5, -7)
	ints.AppendInt(1e18, 1<<40)
	for _, req := range []*WriteReq{
		{Shards: []ShardWrite{{ID: make([]byte, 20), Start: 1563703200, Key: "pmu1/vang", Points: pts}}},
		{Repair: true, Shards: []ShardWrite{{ID: []byte{1}, Start: -40, Key: "k", Points: ints}, {Key: "e"}}},
	} {
		b, _ := AppendWriteReq(nil, req)
		f.Add(b)
	}
	resp, _ := AppendWriteResp(nil, &WriteResp{Stored: 3})
	f.Add(resp)
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast WriteReq
		var ok bool
		grew := allocated(func() { ok = ReadWriteReq(b, &fast) })
		if limit := uint64(3*rpc.DecodeCostFactor*len(b) + 64<<10); grew > limit {
			t.Fatalf("ReadWriteReq of %d bytes allocated %d, over %d", len(b), grew, limit)
		}
		if ok {
			var slow WriteReq
			if err := rpc.Decode(b, &slow); err != nil {
				t.Fatalf("ReadWriteReq took %x, which rpc.Decode refuses: %v", b, err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%x: ReadWriteReq = %+v, rpc.Decode = %+v", b, fast, slow)
			}
		}
		var fr WriteResp
		if ReadWriteResp(b, &fr) {
			var sr WriteResp
			if err := rpc.Decode(b, &sr); err != nil || !reflect.DeepEqual(fr, sr) {
				t.Fatalf("%x: ReadWriteResp = %+v, rpc.Decode = %+v, %v", b, fr, sr, err)
			}
		}
	})
}

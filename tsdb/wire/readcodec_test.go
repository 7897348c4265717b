package wire

import (
	"bytes"
	"math"
	"math/rand"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

var codecInts = []int64{0, 1, 127, 128, 255, 256, 65535, 65536, 1563703200e9, math.MaxInt64, -1, -32, -33, -128, -129, -40000, -3e9, math.MinInt64}

// randomReadReq makes a read request of every shape the read path and repair send.
func randomReadReq(rnd *rand.Rand) *ReadReq {
	req := &ReadReq{}
	for range rnd.Intn(70) {
		id := make([]byte, 20)
		rnd.Read(id)
		if rnd.Intn(10) == 0 {
			id = nil
		}
		key := make([]byte, rnd.Intn(300)+1)
		for i := range key {
			key[i] = byte('a' + rnd.Intn(26))
		}
		s := ShardRead{ID: id, Start: codecInts[rnd.Intn(len(codecInts))], Q: int64(rnd.Intn(3)) * 600, Key: string(key),
			From: codecInts[rnd.Intn(len(codecInts))], To: codecInts[rnd.Intn(len(codecInts))],
			Digest: rnd.Intn(2) == 0, Strong: rnd.Intn(5) == 0, Packed: rnd.Intn(2) == 0, SetHash: rnd.Intn(5) == 0}
		if rnd.Intn(2) == 0 {
			s.PackedVersion = rnd.Intn(300)
		}
		req.Shards = append(req.Shards, s)
	}
	return req
}

// randomReadResp makes answers of every shape replicas send: digests, points in the
// wire form or packed, tombstones, set hashes.
func randomReadResp(rnd *rand.Rand) *ReadResp {
	resp := &ReadResp{}
	for range rnd.Intn(70) {
		s := ShardResult{Held: rnd.Intn(4) != 0, Count: int(codecInts[rnd.Intn(len(codecInts))]), Hash: rnd.Uint64() >> rnd.Intn(64), SetHash: rnd.Intn(5) == 0}
		var pts series.Points
		t := rnd.Int63n(2e18) - 1e18
		isInt := rnd.Intn(3) == 0
		for range rnd.Intn(4) * rnd.Intn(200) {
			t += rnd.Int63n(1e9) + 1
			if isInt {
				pts.AppendInt(t, rnd.Int63()-rnd.Int63())
			} else {
				pts.AppendFloat(t, rnd.NormFloat64()*1e6)
			}
		}
		switch rnd.Intn(3) {
		case 0:
			s.Points = pts
		case 1:
			s.Packed = series.AppendPackedFor(nil, &pts, series.PackedVersion)
		}
		for range rnd.Intn(3) * rnd.Intn(3) {
			s.Deleted = append(s.Deleted, Range{From: codecInts[rnd.Intn(len(codecInts))], To: codecInts[rnd.Intn(len(codecInts))]})
		}
		resp.Shards = append(resp.Shards, s)
	}
	return resp
}

// TestReadReqCodecMatchesReflection: the hand-written encoding is msgpack/v5's byte
// for byte, and the hand-written decoding of it equals rpc.Decode's.
func TestReadReqCodecMatchesReflection(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	for i := range 500 {
		req := randomReadReq(rnd)
		want, err := rpc.Encode(req)
		if err != nil {
			t.Fatal(err)
		}
		got := EncodeReadReq(req)
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: hand-written encoding differs from msgpack/v5's:\n got %x\nwant %x", i, got, want)
		}
		var fast, slow ReadReq
		if !ReadReadReq(got, &fast) {
			t.Fatalf("case %d: ReadReadReq refused what AppendReadReq wrote", i)
		}
		if err := rpc.Decode(got, &slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("case %d: ReadReadReq = %+v, rpc.Decode = %+v", i, fast, slow)
		}
		if len(fast.Shards) != len(req.Shards) || len(req.Shards) > 0 && fast.Shards[0].Key != req.Shards[0].Key {
			t.Fatalf("case %d: decoded %d shards, sent %d", i, len(fast.Shards), len(req.Shards))
		}
		got[len(got)/2] ^= 0xff // the fast decoder's copy must not alias the frame
		if len(fast.Shards) > 0 && !reflect.DeepEqual(fast.Shards[0].ID, slow.Shards[0].ID) {
			t.Fatalf("case %d: a decoded ID changed with the frame's bytes", i)
		}
	}
}

// TestReadRespCodecMatchesReflection: as for requests, for every answer shape.
func TestReadRespCodecMatchesReflection(t *testing.T) {
	rnd := rand.New(rand.NewSource(2))
	for i := range 500 {
		resp := randomReadResp(rnd)
		want, err := rpc.Encode(resp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EncodeReadResp(resp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: hand-written encoding differs from msgpack/v5's:\n got %x\nwant %x", i, got, want)
		}
		var fast, slow ReadResp
		if !ReadReadResp(got, &fast) {
			t.Fatalf("case %d: ReadReadResp refused what AppendReadResp wrote", i)
		}
		if err := rpc.Decode(got, &slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("case %d: ReadReadResp = %+v, rpc.Decode = %+v", i, fast, slow)
		}
		for j := range fast.Shards {
			if err := fast.Shards[j].Unpack(); err != nil {
				t.Fatalf("case %d shard %d: %v", i, j, err)
			}
			want := resp.Shards[j].Points
			if len(resp.Shards[j].Packed) > 0 {
				want, _ = series.DecodePacked(resp.Shards[j].Packed)
			}
			if g := fast.Shards[j].Points; g.Len() != want.Len() || g.Len() > 0 && (g.T[0] != want.T[0] || g.Type != want.Type) {
				t.Fatalf("case %d shard %d: %d points, want %d", i, j, g.Len(), want.Len())
			}
		}
	}
}

// TestReadCodecFallsBack: what the hand-written codec does not write (string points)
// and what it does not read (an unknown field, string points) go the general way,
// with the same result; what is malformed is refused with rpc.Decode's error.
func TestReadCodecFallsBack(t *testing.T) {
	var s series.Points
	s.AppendString(5, "x")
	resp := &ReadResp{Shards: []ShardResult{{Held: true, Count: 1, Points: s}}}
	if _, ok := AppendReadResp(nil, resp); ok {
		t.Fatal("AppendReadResp wrote string points by hand")
	}
	b, err := EncodeReadResp(resp)
	if err != nil {
		t.Fatal(err)
	}
	var fast, got ReadResp
	if ReadReadResp(b, &fast) {
		t.Fatal("ReadReadResp took string points, which it does not read")
	}
	if err := DecodeReadResp(b, &got); err != nil || got.Shards[0].Points.S[0] != "x" {
		t.Fatalf("DecodeReadResp of string points = %+v, %v", got, err)
	}
	// A field a newer peer might add: the general decoder skips it.
	type newerShardRead struct {
		Key   string `msgpack:"k"`
		Newer int    `msgpack:"zz"`
	}
	b, _ = msgpack.Marshal(map[string]any{"s": []newerShardRead{{Key: "k", Newer: 3}}})
	var fr, gr ReadReq
	if ReadReadReq(b, &fr) {
		t.Fatal("ReadReadReq took a field it does not know")
	}
	if err := DecodeReadReq(b, &gr); err != nil || len(gr.Shards) != 1 || gr.Shards[0].Key != "k" {
		t.Fatalf("DecodeReadReq of a newer request = %+v, %v", gr, err)
	}
	nils := []byte{0x81, 0xa1, 's', 0xdc, 0xff, 0xff}
	if err := DecodeReadReq(nils, &gr); err == nil {
		t.Fatal("DecodeReadReq took an array that declares more shards than there are bytes")
	}
	if err := DecodeReadResp(nils, &got); err == nil {
		t.Fatal("DecodeReadResp took an array that declares more shards than there are bytes")
	}
}

// FuzzReadCodec feeds any bytes to the hand-written readers: they never panic, what
// they take rpc.Decode takes with the same result, and what they allocate stays
// within the bound rpc.Decode keeps.
func FuzzReadCodec(f *testing.F) {
	rnd := rand.New(rand.NewSource(3))
	for range 4 {
		f.Add(EncodeReadReq(randomReadReq(rnd)))
		b, _ := EncodeReadResp(randomReadResp(rnd))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		limit := uint64(3*rpc.DecodeCostFactor*len(b) + 64<<10)
		var fq ReadReq
		var ok bool
		if grew := allocated(func() { ok = ReadReadReq(b, &fq) }); grew > limit {
			t.Fatalf("ReadReadReq of %d bytes allocated %d, over %d", len(b), grew, limit)
		}
		if ok {
			var sq ReadReq
			if err := rpc.Decode(b, &sq); err != nil || !reflect.DeepEqual(fq, sq) {
				t.Fatalf("ReadReadReq took %x as %+v; rpc.Decode: %+v, %v", b, fq, sq, err)
			}
		}
		var fr ReadResp
		if grew := allocated(func() { ok = ReadReadResp(b, &fr) }); grew > limit {
			t.Fatalf("ReadReadResp of %d bytes allocated %d, over %d", len(b), grew, limit)
		}
		if ok {
			var sr ReadResp
			if err := rpc.Decode(b, &sr); err != nil || !reflect.DeepEqual(fr, sr) {
				t.Fatalf("ReadReadResp took %x as %+v; rpc.Decode: %+v, %v", b, fr, sr, err)
			}
		}
	})
}

// GetResp.Unpack joins parts in time order, skips empty ones, and refuses parts out
// of order or of mixed types; without parts it reads Packed.
func TestGetRespUnpackParts(t *testing.T) {
	var a, b, s series.Points
	for i := range 10 {
		a.AppendFloat(int64(i), float64(i)/3)
		b.AppendFloat(int64(100+i), float64(i)/7)
	}
	s.AppendString(200, "x")
	pack := func(p series.Points) []byte { return series.AppendPackedFor(nil, &p, series.PackedVersion) }
	empty := series.Points{Type: series.Float}
	r := GetResp{Parts: [][]byte{pack(a), pack(empty), pack(b)}, Packed: pack(empty)}
	if err := r.Unpack(); err != nil {
		t.Fatal(err)
	}
	if want := series.Concat(a, b); !reflect.DeepEqual(r.Points, want) {
		t.Fatalf("Unpack of parts = %+v; want %+v", r.Points, want)
	}
	for what, parts := range map[string][][]byte{
		"out of order": {pack(b), pack(a)},
		"overlapping":  {pack(a), pack(a)},
		"mixed types":  {pack(a), pack(s)},
		"undecodable":  {pack(a), {0xff}},
	} {
		r := GetResp{Parts: parts}
		if err := r.Unpack(); err == nil {
			t.Errorf("Unpack took parts %s", what)
		}
	}
	r = GetResp{Packed: pack(a)}
	if err := r.Unpack(); err != nil || !reflect.DeepEqual(r.Points, a) {
		t.Fatalf("Unpack without parts = %+v, %v", r.Points, err)
	}
}

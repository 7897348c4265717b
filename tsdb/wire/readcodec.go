package wire

import (
	"unsafe"

	"github.com/tsdht/tsdht/internal/mp"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// The read path's replica messages (ReadReq, ReadResp) are encoded and decoded by hand
// too, as the write path's are (writecodec.go): a read of 150 s of history asks up to
// 48 shards of some 17 replicas, and reflection over their ShardReads and
// ShardResults was the largest share of a read's CPU after the store's. The bytes are
// msgpack/v5's own for the same values, so a peer that decodes by reflection reads
// them unchanged; the readers take the forms written here and answer false for
// anything else (a field they do not know, string points), which the caller then
// decodes with rpc.Decode.

// AppendReadReq appends req's msgpack encoding to dst.
func AppendReadReq(dst []byte, req *ReadReq) []byte {
	dst = mp.AppendMapLen(dst, 1)
	dst = mp.AppendStr(dst, "s")
	if req.Shards == nil {
		return append(dst, 0xc0) // as msgpack/v5 encodes a nil slice
	}
	dst = mp.AppendArrayLen(dst, len(req.Shards))
	for i := range req.Shards {
		s := &req.Shards[i]
		fields := 7
		for _, set := range []bool{s.Packed, s.PackedVersion != 0, s.SetHash, s.Q != 0} {
			if set {
				fields++
			}
		}
		dst = mp.AppendMapLen(dst, fields)
		dst = mp.AppendStr(dst, "id")
		dst = mp.AppendBin(dst, s.ID)
		dst = mp.AppendStr(dst, "q")
		dst = mp.AppendInt(dst, s.Start)
		if s.Q != 0 {
			dst = mp.AppendStr(dst, "ql")
			dst = mp.AppendInt(dst, s.Q)
		}
		dst = mp.AppendStr(dst, "k")
		dst = mp.AppendStr(dst, s.Key)
		dst = mp.AppendStr(dst, "f")
		dst = mp.AppendInt(dst, s.From)
		dst = mp.AppendStr(dst, "t")
		dst = mp.AppendInt(dst, s.To)
		dst = mp.AppendStr(dst, "d")
		dst = appendBool(dst, s.Digest)
		dst = mp.AppendStr(dst, "sd")
		dst = appendBool(dst, s.Strong)
		if s.Packed {
			dst = mp.AppendStr(dst, "pk")
			dst = appendBool(dst, true)
		}
		if s.PackedVersion != 0 {
			dst = mp.AppendStr(dst, "pv")
			dst = mp.AppendInt(dst, int64(s.PackedVersion))
		}
		if s.SetHash {
			dst = mp.AppendStr(dst, "sh")
			dst = appendBool(dst, true)
		}
	}
	return dst
}

// EncodeReadReq returns req's msgpack encoding.
func EncodeReadReq(req *ReadReq) []byte {
	n := 8
	for i := range req.Shards {
		n += 64 + len(req.Shards[i].ID) + len(req.Shards[i].Key)
	}
	return AppendReadReq(make([]byte, 0, n), req)
}

// shardReadBytes is what a decoded ShardRead takes in memory, before its slices.
const shardReadBytes = int(unsafe.Sizeof(ShardRead{}))

// ReadReadReq decodes b, a msgpack ReadReq as AppendReadReq writes it, into req. It
// answers false for any other form, and for anything malformed: decode b with
// rpc.Decode then, which checks it and says what is wrong. What it allocates stays
// within rpc.DecodeCostFactor bytes per byte of b; nothing in req aliases b.
func ReadReadReq(b []byte, req *ReadReq) bool {
	r := mp.Reader{B: b}
	m, ok := r.MapLen()
	if !ok {
		return false
	}
	*req = ReadReq{}
	for range m {
		k, ok := r.StrBytes()
		if !ok || string(k) != "s" {
			return false
		}
		if isNil(&r) {
			req.Shards = nil
			continue
		}
		n, ok := r.ArrayLen()
		if !ok || n*(shardReadBytes+quantaIDLen) > rpc.DecodeCostFactor*len(b) {
			return false
		}
		req.Shards = make([]ShardRead, n)
		for i := range req.Shards {
			if !readShardRead(&r, &req.Shards[i]) {
				return false
			}
		}
	}
	return r.Left() == 0
}

// quantaIDLen is a shard ID's length (quanta.IDLen), what a decoded ShardRead's ID
// usually takes besides the struct.
const quantaIDLen = 20

func readShardRead(r *mp.Reader, s *ShardRead) bool {
	m, ok := r.MapLen()
	if !ok {
		return false
	}
	for range m {
		k, ok := r.StrBytes()
		if !ok {
			return false
		}
		switch string(k) {
		case "id":
			id, ok := r.Bin()
			if !ok {
				return false
			}
			s.ID = nil
			if id != nil {
				s.ID = append([]byte{}, id...) // b is the frame's buffer: keep no alias
			}
		case "q":
			s.Start, ok = r.Int()
		case "ql":
			s.Q, ok = r.Int()
		case "k":
			var key []byte
			key, ok = r.StrBytes()
			s.Key = string(key)
		case "f":
			s.From, ok = r.Int()
		case "t":
			s.To, ok = r.Int()
		case "d":
			s.Digest, ok = r.Bool()
		case "sd":
			s.Strong, ok = r.Bool()
		case "pk":
			s.Packed, ok = r.Bool()
		case "pv":
			var v int64
			v, ok = r.Int()
			s.PackedVersion = int(v)
			ok = ok && int64(s.PackedVersion) == v
		case "sh":
			s.SetHash, ok = r.Bool()
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// DecodeReadReq decodes a ReadReq: by hand when ReadReadReq can, else with rpc.Decode
// (whose errors say what is wrong).
func DecodeReadReq(b []byte, req *ReadReq) error {
	if ReadReadReq(b, req) {
		return nil
	}
	*req = ReadReq{}
	return rpc.Decode(b, req)
}

// AppendReadResp appends resp's msgpack encoding to dst; ok is false, dst unchanged,
// for an answer holding string points, which it does not write by hand (encode that
// one with rpc.Encode).
func AppendReadResp(dst []byte, resp *ReadResp) (_ []byte, ok bool) {
	for i := range resp.Shards {
		if resp.Shards[i].Points.Type == series.String {
			return dst, false
		}
	}
	dst = mp.AppendMapLen(dst, 1)
	dst = mp.AppendStr(dst, "s")
	if resp.Shards == nil {
		return append(dst, 0xc0), true
	}
	dst = mp.AppendArrayLen(dst, len(resp.Shards))
	for i := range resp.Shards {
		s := &resp.Shards[i]
		fields := 4
		for _, set := range []bool{len(s.Packed) > 0, len(s.Deleted) > 0, s.SetHash} {
			if set {
				fields++
			}
		}
		dst = mp.AppendMapLen(dst, fields)
		dst = mp.AppendStr(dst, "h")
		dst = appendBool(dst, s.Held)
		dst = mp.AppendStr(dst, "c")
		dst = mp.AppendInt(dst, int64(s.Count))
		dst = mp.AppendStr(dst, "x")
		dst = mp.AppendUint(dst, s.Hash)
		dst = mp.AppendStr(dst, "p")
		dst = series.AppendWire(dst, &s.Points)
		if len(s.Packed) > 0 {
			dst = mp.AppendStr(dst, "pp")
			dst = mp.AppendBin(dst, s.Packed)
		}
		if len(s.Deleted) > 0 {
			dst = mp.AppendStr(dst, "del")
			dst = appendRanges(dst, s.Deleted)
		}
		if s.SetHash {
			dst = mp.AppendStr(dst, "sh")
			dst = appendBool(dst, true)
		}
	}
	return dst, true
}

// EncodeReadResp returns resp's msgpack encoding, by hand when AppendReadResp can.
func EncodeReadResp(resp *ReadResp) ([]byte, error) {
	n := 8
	for i := range resp.Shards {
		s := &resp.Shards[i]
		n += 48 + len(s.Packed) + 24*len(s.Deleted) + s.Points.WireSize()
	}
	if b, ok := AppendReadResp(make([]byte, 0, n), resp); ok {
		return b, nil
	}
	return rpc.Encode(resp)
}

// shardResultBytes is what a decoded ShardResult takes in memory, before its slices.
const shardResultBytes = int(unsafe.Sizeof(ShardResult{}))

// ReadReadResp decodes b, a msgpack ReadResp as AppendReadResp writes it, into resp;
// false for any other form or anything malformed (decode it with rpc.Decode). Each
// answer's Packed aliases b, which the caller must not reuse while it holds them
// (ShardResult.Unpack decodes and drops them). What it allocates stays within
// rpc.DecodeCostFactor bytes per byte of b.
func ReadReadResp(b []byte, resp *ReadResp) bool {
	r := mp.Reader{B: b}
	m, ok := r.MapLen()
	if !ok {
		return false
	}
	*resp = ReadResp{}
	for range m {
		k, ok := r.StrBytes()
		if !ok || string(k) != "s" {
			return false
		}
		if isNil(&r) {
			resp.Shards = nil
			continue
		}
		n, ok := r.ArrayLen()
		if !ok || n*shardResultBytes > rpc.DecodeCostFactor*len(b) {
			return false
		}
		resp.Shards = make([]ShardResult, n)
		for i := range resp.Shards {
			if !readShardResult(&r, &resp.Shards[i]) {
				return false
			}
		}
	}
	return r.Left() == 0
}

func readShardResult(r *mp.Reader, s *ShardResult) bool {
	m, ok := r.MapLen()
	if !ok {
		return false
	}
	for range m {
		k, ok := r.StrBytes()
		if !ok {
			return false
		}
		switch string(k) {
		case "h":
			s.Held, ok = r.Bool()
		case "c":
			var c int64
			c, ok = r.Int()
			s.Count = int(c)
			ok = ok && int64(s.Count) == c
		case "x":
			s.Hash, ok = r.Uint()
		case "p":
			ok = series.ReadWire(r, &s.Points)
		case "pp":
			s.Packed, ok = r.Bin()
		case "del":
			s.Deleted, ok = readRanges(r)
		case "sh":
			s.SetHash, ok = r.Bool()
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// DecodeReadResp decodes a ReadResp: by hand when ReadReadResp can, else with
// rpc.Decode.
func DecodeReadResp(b []byte, resp *ReadResp) error {
	if ReadReadResp(b, resp) {
		return nil
	}
	*resp = ReadResp{}
	return rpc.Decode(b, resp)
}

// isNil moves past a nil, if that is what comes next.
func isNil(r *mp.Reader) bool {
	if r.Left() > 0 && r.B[r.Off] == 0xc0 {
		r.Off++
		return true
	}
	return false
}

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 0xc3)
	}
	return append(dst, 0xc2)
}

// appendRanges appends rs as msgpack/v5 encodes a []Range.
func appendRanges(dst []byte, rs []Range) []byte {
	dst = mp.AppendArrayLen(dst, len(rs))
	for _, x := range rs {
		dst = mp.AppendMapLen(dst, 2)
		dst = mp.AppendStr(dst, "f")
		dst = mp.AppendInt(dst, x.From)
		dst = mp.AppendStr(dst, "t")
		dst = mp.AppendInt(dst, x.To)
	}
	return dst
}

func readRanges(r *mp.Reader) ([]Range, bool) {
	n, ok := r.ArrayLen()
	if !ok || n > r.Left()/7 { // each takes at least 7 bytes: {f: 0, t: 0}
		return nil, false
	}
	rs := make([]Range, n)
	for i := range rs {
		m, ok := r.MapLen()
		if !ok {
			return nil, false
		}
		for range m {
			k, ok := r.StrBytes()
			if !ok {
				return nil, false
			}
			switch string(k) {
			case "f":
				rs[i].From, ok = r.Int()
			case "t":
				rs[i].To, ok = r.Int()
			default:
				return nil, false
			}
			if !ok {
				return nil, false
			}
		}
	}
	return rs, true
}

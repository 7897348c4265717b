package wire

import (
	"unsafe"

	"github.com/tsdht/tsdht/internal/mp"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// The write path's messages are encoded and decoded by hand (package mp): every
// single-point write sends a WriteReq to each of its replicas and reads back their
// WriteResps, and reflection cost more CPU than a replica's store append. The bytes
// are msgpack/v5's own for the same values, so peers that decode by reflection read
// them unchanged; the readers take the forms written here and answer false for
// anything else (a field they do not know, tombstones), which the caller then
// decodes with rpc.Decode.

// AppendWriteReq appends req's msgpack encoding to dst. ok is false, dst unchanged,
// for a request it does not write by hand (shards carrying tombstones, a Keep repair):
// encode that one with rpc.Encode.
func AppendWriteReq(dst []byte, req *WriteReq) (_ []byte, ok bool) {
	if req.Keep {
		return dst, false
	}
	for i := range req.Shards {
		if len(req.Shards[i].Deleted) > 0 {
			return dst, false
		}
	}
	fields := 1
	if req.Repair {
		fields++
	}
	dst = mp.AppendMapLen(dst, fields)
	dst = mp.AppendStr(dst, "s")
	dst = mp.AppendArrayLen(dst, len(req.Shards))
	for i := range req.Shards {
		w := &req.Shards[i]
		fields := 4
		if w.Q != 0 {
			fields++
		}
		dst = mp.AppendMapLen(dst, fields)
		dst = mp.AppendStr(dst, "id")
		dst = mp.AppendBin(dst, w.ID)
		dst = mp.AppendStr(dst, "q")
		dst = mp.AppendInt(dst, w.Start)
		if w.Q != 0 {
			dst = mp.AppendStr(dst, "ql")
			dst = mp.AppendInt(dst, w.Q)
		}
		dst = mp.AppendStr(dst, "k")
		dst = mp.AppendStr(dst, w.Key)
		dst = mp.AppendStr(dst, "p")
		dst = series.AppendWire(dst, &w.Points)
	}
	if req.Repair {
		dst = mp.AppendStr(dst, "rp")
		dst = append(dst, 0xc3) // true
	}
	return dst, true
}

// EncodeWriteReq returns req's msgpack encoding, by hand when AppendWriteReq can.
func EncodeWriteReq(req *WriteReq) ([]byte, error) {
	if b, ok := AppendWriteReq(make([]byte, 0, writeReqSize(req)), req); ok {
		return b, nil
	}
	return rpc.Encode(req)
}

// writeReqSize bounds what AppendWriteReq writes for req without tombstones.
func writeReqSize(req *WriteReq) int {
	n := 16
	for i := range req.Shards {
		w := &req.Shards[i]
		n += 32 + len(w.ID) + len(w.Key) + w.Points.WireSize()
	}
	return n
}

// shardWriteBytes is what a decoded ShardWrite takes in memory, before its slices.
const shardWriteBytes = int(unsafe.Sizeof(ShardWrite{}))

// ReadWriteReq decodes b, a msgpack WriteReq as AppendWriteReq writes it, into req.
// It answers false for any other form, and for anything malformed: decode b with
// rpc.Decode then, which checks it and says what is wrong. What it allocates stays
// within rpc.DecodeCostFactor bytes per byte of b.
func ReadWriteReq(b []byte, req *WriteReq) bool {
	r := mp.Reader{B: b}
	m, ok := r.MapLen()
	if !ok {
		return false
	}
	*req = WriteReq{}
	for range m {
		k, ok := r.StrBytes()
		if !ok {
			return false
		}
		switch string(k) {
		case "s":
			n, ok := r.ArrayLen()
			if !ok || n*shardWriteBytes > rpc.DecodeCostFactor*len(b) {
				return false
			}
			req.Shards = make([]ShardWrite, n)
			for i := range req.Shards {
				if !readShardWrite(&r, &req.Shards[i]) {
					return false
				}
			}
		case "rp":
			c, ok := r.Bool()
			if !ok {
				return false
			}
			req.Repair = c
		default:
			return false
		}
	}
	return r.Left() == 0
}

func readShardWrite(r *mp.Reader, w *ShardWrite) bool {
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
			w.ID = nil
			if id != nil {
				w.ID = append([]byte{}, id...) // b is the frame's buffer: keep no alias
			}
		case "q":
			if w.Start, ok = r.Int(); !ok {
				return false
			}
		case "ql":
			if w.Q, ok = r.Int(); !ok {
				return false
			}
		case "k":
			s, ok := r.StrBytes()
			if !ok {
				return false
			}
			w.Key = string(s)
		case "p":
			if !series.ReadWire(r, &w.Points) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// DecodeWriteReq decodes a WriteReq: by hand when ReadWriteReq can, else with
// rpc.Decode (whose errors say what is wrong).
func DecodeWriteReq(b []byte, req *WriteReq) error {
	if ReadWriteReq(b, req) {
		return nil
	}
	*req = WriteReq{}
	return rpc.Decode(b, req)
}

// AppendWriteResp appends resp's msgpack encoding to dst; ok is false, dst
// unchanged, for a response with tombstones or conflicts (encode it with rpc.Encode).
func AppendWriteResp(dst []byte, resp *WriteResp) (_ []byte, ok bool) {
	if len(resp.Deleted) > 0 || len(resp.Conflicts) > 0 {
		return dst, false
	}
	dst = mp.AppendMapLen(dst, 1)
	dst = mp.AppendStr(dst, "n")
	return mp.AppendInt(dst, int64(resp.Stored)), true
}

// EncodeWriteResp returns resp's msgpack encoding, by hand when AppendWriteResp can.
func EncodeWriteResp(resp *WriteResp) ([]byte, error) {
	if b, ok := AppendWriteResp(make([]byte, 0, 16), resp); ok {
		return b, nil
	}
	return rpc.Encode(resp)
}

// ReadWriteResp decodes b, a WriteResp as AppendWriteResp writes it, into resp;
// false for any other form (decode it with rpc.Decode).
func ReadWriteResp(b []byte, resp *WriteResp) bool {
	r := mp.Reader{B: b}
	m, ok := r.MapLen()
	if !ok {
		return false
	}
	*resp = WriteResp{}
	for range m {
		k, ok := r.StrBytes()
		if !ok || string(k) != "n" {
			return false
		}
		n, ok := r.Int()
		if !ok || int64(int(n)) != n {
			return false
		}
		resp.Stored = int(n)
	}
	return r.Left() == 0
}

// DecodeWriteResp decodes a WriteResp: by hand when ReadWriteResp can, else with
// rpc.Decode.
func DecodeWriteResp(b []byte, resp *WriteResp) error {
	if ReadWriteResp(b, resp) {
		return nil
	}
	*resp = WriteResp{}
	return rpc.Decode(b, resp)
}

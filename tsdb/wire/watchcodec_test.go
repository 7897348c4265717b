package wire

import (
	"bytes"
	"math"
	"math/rand"
	"reflect"
	"testing"

	"github.com/tsdht/tsdht/internal/mp"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// randomWatchNextResp makes an answer of every shape a poll sends: batches with runs
// of float and int points, late or not, ended ones, ids and counts of every size.
func randomWatchNextResp(rnd *rand.Rand) *WatchNextResp {
	resp := &WatchNextResp{}
	if rnd.Intn(10) == 0 {
		return resp
	}
	ids := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, 1 << 32, math.MaxInt64, math.MaxUint64}
	var made []WatchRun // runs made so far: later batches share some, as a session's do
	for range rnd.Intn(5) + 1 {
		b := WatchBatch{ID: ids[rnd.Intn(len(ids))], Seen: ids[rnd.Intn(len(ids))]}
		if rnd.Intn(5) == 0 {
			b.Ended = "subscription ended: the subscriber fell behind"
		} else {
			for range rnd.Intn(4) + 1 {
				if len(made) > 0 && rnd.Intn(3) == 0 {
					r := made[rnd.Intn(len(made))]
					if rnd.Intn(4) == 0 {
						r.Late = !r.Late // the same points, flagged otherwise: encoded anew
					}
					b.Runs = append(b.Runs, r)
					continue
				}
				var pts series.Points
				t := rnd.Int63n(2e18) - 1e18
				isInt := rnd.Intn(3) == 0
				for range rnd.Intn(50) + 1 {
					t += rnd.Int63n(1e9) + 1
					if isInt {
						pts.AppendInt(t, rnd.Int63()-rnd.Int63())
					} else {
						pts.AppendFloat(t, rnd.NormFloat64())
					}
				}
				b.Runs = append(b.Runs, WatchRun{Key: "pmu/1/freq", Points: pts, Late: rnd.Intn(4) == 0})
				made = append(made, b.Runs[len(b.Runs)-1])
			}
		}
		resp.Subs = append(resp.Subs, b)
	}
	for range rnd.Intn(3) {
		if len(made) == 0 {
			break
		}
		g := WatchGroup{Runs: []WatchRun{made[rnd.Intn(len(made))]}}
		for range rnd.Intn(4) {
			g.IDs = append(g.IDs, ids[rnd.Intn(len(ids))])
		}
		if rnd.Intn(2) == 0 {
			g.IDsWire = AppendWatchIDs(nil, g.IDs) // as a node's plan keeps them
		}
		resp.Groups = append(resp.Groups, g)
	}
	if rnd.Intn(2) == 0 {
		resp.Token = ids[rnd.Intn(len(ids))]
	}
	return resp
}

// TestWatchNextRespCodec: the hand encoding is msgpack/v5's, byte for byte (a group's
// IDs copied from IDsWire too), and the hand decoding reads back what either wrote.
func TestWatchNextRespCodec(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	for i := range 500 {
		checkHandCodec(t, i, randomWatchNextResp(rnd), EncodeWatchNextResp, ReadWatchNextResp)
	}
}

// FuzzWatchNextResp: whatever the bytes, the hand decoder either agrees with rpc.Decode
// or refuses them; it never panics.
func FuzzWatchNextResp(f *testing.F) {
	rnd := rand.New(rand.NewSource(2))
	for range 20 {
		b, _ := EncodeWatchNextResp(randomWatchNextResp(rnd))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkHandDecoder(t, b, ReadWatchNextResp) })
}

// randomWatchNextReq makes a poll of every shape: sessions, cursors and waits of every
// size, none or no cursor, closing or not, lingering or not.
func randomWatchNextReq(rnd *rand.Rand) *WatchNextReq {
	nums := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, 1 << 32, math.MaxInt64, math.MaxUint64}
	req := &WatchNextReq{Session: nums[rnd.Intn(len(nums))], WaitMillis: int64(nums[rnd.Intn(len(nums))] >> 1), Close: rnd.Intn(4) == 0,
		Groups: rnd.Intn(2) == 0}
	if rnd.Intn(8) == 0 {
		req.WaitMillis = -req.WaitMillis
	}
	if rnd.Intn(3) == 0 {
		req.Token = nums[rnd.Intn(len(nums))]
	}
	if rnd.Intn(3) == 0 {
		req.LingerMillis = int64(nums[rnd.Intn(len(nums))] >> 1)
		if rnd.Intn(4) == 0 {
			req.LingerMillis = -req.LingerMillis
		}
	}
	if rnd.Intn(10) > 0 {
		req.Cursors = []WatchCursor{}
		for range rnd.Intn(120) {
			req.Cursors = append(req.Cursors, WatchCursor{ID: nums[rnd.Intn(len(nums))], Seen: nums[rnd.Intn(len(nums))]})
		}
	}
	return req
}

// TestWatchNextReqCodec: as TestWatchNextRespCodec, for a poll.
func TestWatchNextReqCodec(t *testing.T) {
	rnd := rand.New(rand.NewSource(3))
	for i := range 500 {
		checkHandCodec(t, i, randomWatchNextReq(rnd), EncodeWatchNextReq, ReadWatchNextReq)
	}
}

// FuzzWatchNextReq: as FuzzWatchNextResp, for a poll.
func FuzzWatchNextReq(f *testing.F) {
	rnd := rand.New(rand.NewSource(4))
	for range 20 {
		b, _ := EncodeWatchNextReq(randomWatchNextReq(rnd))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkHandDecoder(t, b, ReadWatchNextReq) })
}

// checkHandCodec checks a hand codec on v (case i): its encoding is rpc.Encode's, byte
// for byte, and its reader reads back what rpc.Decode does.
func checkHandCodec[T any](t *testing.T, i int, v *T, encode func(*T) ([]byte, error), read func([]byte, *T) bool) {
	t.Helper()
	want, err := rpc.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := encode(v)
	if !bytes.Equal(got, want) {
		t.Fatalf("case %d: hand encoding differs from msgpack's\n got %x\nwant %x", i, got, want)
	}
	var back, ref T
	if !read(got, &back) {
		t.Fatalf("case %d: the hand decoder refused the hand encoding", i)
	}
	if err := rpc.Decode(got, &ref); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, ref) {
		t.Fatalf("case %d: hand decoding %+v, msgpack's %+v", i, back, ref)
	}
}

// checkHandDecoder checks that read, on any bytes, either refuses them or agrees with
// rpc.Decode.
func checkHandDecoder[T any](t *testing.T, b []byte, read func([]byte, *T) bool) {
	var got, ref T
	if !read(b, &got) {
		return
	}
	if err := rpc.Decode(b, &ref); err != nil {
		t.Fatalf("hand decoder took what rpc.Decode refuses (%v): %x", err, b)
	}
	if !reflect.DeepEqual(got, ref) {
		t.Fatalf("hand decoding %+v, rpc.Decode %+v", got, ref)
	}
}

// BenchmarkWatchNextRespShared is a poll's answer for a session of 100 subscriptions
// of one series after one notification: shared, the run every batch holds is the same
// one (as the node's answer is); copied, each batch holds a copy of it (encoded anew).
func BenchmarkWatchNextRespShared(b *testing.B) {
	var pts series.Points
	pts.AppendFloat(1764300000016666666, 59.998)
	for _, shared := range []bool{true, false} {
		resp := &WatchNextResp{}
		for i := range 100 {
			p := pts
			if !shared {
				p = series.Concat(pts)
			}
			resp.Subs = append(resp.Subs, WatchBatch{ID: uint64(i), Seen: 7, Runs: []WatchRun{{Key: "pmu/1/freq", Points: p}}})
		}
		name := map[bool]string{true: "shared", false: "copied"}[shared]
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, 0, 1<<16)
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendWatchNextResp(buf[:0], resp)
			}
		})
	}
}

// BenchmarkReadWatchNextRespShared decodes the answer of BenchmarkWatchNextRespShared:
// shared, the run every batch holds is decoded once.
func BenchmarkReadWatchNextRespShared(b *testing.B) {
	var pts series.Points
	pts.AppendFloat(1764300000016666666, 59.998)
	for _, shared := range []bool{true, false} {
		resp := &WatchNextResp{}
		for i := range 100 {
			p := series.Concat(pts)
			if !shared {
				p.F[0] += float64(i) // a run of its own
			}
			resp.Subs = append(resp.Subs, WatchBatch{ID: uint64(i), Seen: 7, Runs: []WatchRun{{Key: "pmu/1/freq", Points: p}}})
		}
		buf, _ := EncodeWatchNextResp(resp)
		b.Run(map[bool]string{true: "shared", false: "distinct"}[shared], func(b *testing.B) {
			b.ReportAllocs()
			var back WatchNextResp
			for b.Loop() {
				if !ReadWatchNextResp(buf, &back) {
					b.Fatal("refused")
				}
			}
		})
	}
}

// BenchmarkReadWatchNextReq decodes a poll of a session of 100 subscriptions, as a
// node does for each of its sessions' polls: allocs/op is what it allocates per poll.
func BenchmarkReadWatchNextReq(b *testing.B) {
	req := &WatchNextReq{Session: 9, WaitMillis: 1000, Groups: true}
	for i := range 100 {
		req.Cursors = append(req.Cursors, WatchCursor{ID: uint64(1000 + i), Seen: uint64(70_000 + i)})
	}
	body, _ := EncodeWatchNextReq(req)
	b.ReportAllocs()
	for b.Loop() {
		var got WatchNextReq
		if !ReadWatchNextReq(body, &got) || len(got.Cursors) != 100 {
			b.Fatal("not read")
		}
	}
}

// randomWatchNotifyReq makes a notification of every shape a coordinator sends: runs
// of one or many series, float and int points, any numbering.
func randomWatchNotifyReq(rnd *rand.Rand) *WatchNotifyReq {
	nums := []uint64{0, 1, 127, 128, 65536, 1 << 32, math.MaxUint64}
	req := &WatchNotifyReq{From: "10.0.0.7:7000", Epoch: nums[rnd.Intn(len(nums))], Seq: nums[rnd.Intn(len(nums))]}
	if rnd.Intn(10) == 0 {
		return req
	}
	for _, b := range randomWatchNextResp(rnd).Subs {
		for _, r := range b.Runs {
			r.Late = false
			req.Runs = append(req.Runs, r)
		}
	}
	return req
}

// TestWatchNotifyReqCodec: as TestWatchNextRespCodec, for a notification.
func TestWatchNotifyReqCodec(t *testing.T) {
	rnd := rand.New(rand.NewSource(5))
	for i := range 500 {
		checkHandCodec(t, i, randomWatchNotifyReq(rnd), EncodeWatchNotifyReq, ReadWatchNotifyReq)
	}
	req := randomWatchNotifyReq(rnd)
	raw, err := rpc.Encode(EncodedWatchNotify(req))
	if err != nil {
		t.Fatal(err)
	}
	var back WatchNotifyReq
	if err := rpc.Decode(raw, &back); err != nil || !reflect.DeepEqual(&back, req) {
		t.Fatalf("EncodedWatchNotify through rpc.Encode: %+v, %v; want %+v", back, err, req)
	}
}

// FuzzWatchNotifyReq: as FuzzWatchNextResp, for a notification.
func FuzzWatchNotifyReq(f *testing.F) {
	rnd := rand.New(rand.NewSource(6))
	for range 20 {
		b, _ := EncodeWatchNotifyReq(randomWatchNotifyReq(rnd))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkHandDecoder(t, b, ReadWatchNotifyReq) })
}

// TestReadWatchNextReqReuses: a poll decoded into the request of a longer one takes its
// cursors' array, every cursor read afresh (none of the last poll's left), and one of
// more cursors than the array holds gets an array of its own.
func TestReadWatchNextReqReuses(t *testing.T) {
	long := &WatchNextReq{Session: 1}
	for i := range 10 {
		long.Cursors = append(long.Cursors, WatchCursor{ID: uint64(i + 1), Seen: 99})
	}
	var req WatchNextReq
	b, _ := EncodeWatchNextReq(long)
	if !ReadWatchNextReq(b, &req) {
		t.Fatal("not read")
	}
	array := &req.Cursors[0]
	// A cursor in the general form, without its Seen: read as 0, not the 99 before.
	two := mp.AppendMapLen(nil, 2)
	two = mp.AppendStr(two, "ses")
	two = mp.AppendUint(two, 2)
	two = mp.AppendStr(two, "c")
	two = mp.AppendArrayLen(two, 2)
	two = mp.AppendUint(mp.AppendStr(mp.AppendMapLen(two, 1), "id"), 7)
	two = mp.AppendUint(mp.AppendStr(mp.AppendUint(mp.AppendStr(mp.AppendMapLen(two, 2), "id"), 8), "s"), 3)
	if !ReadWatchNextReq(two, &req) {
		t.Fatal("the poll of two cursors not read")
	}
	if &req.Cursors[0] != array || !reflect.DeepEqual(req, WatchNextReq{Session: 2, Cursors: []WatchCursor{{ID: 7}, {ID: 8, Seen: 3}}}) {
		t.Fatalf("decoded %+v (array reused: %v); want session 2's two cursors in the array", req, &req.Cursors[0] == array)
	}
	long.Cursors = append(long.Cursors, long.Cursors...)
	b, _ = EncodeWatchNextReq(long)
	if err := DecodeWatchNextReq(b, &req); err != nil || len(req.Cursors) != 20 || req.Cursors[19] != long.Cursors[19] {
		t.Fatalf("decoded %+v, %v; want the 20 cursors", req, err)
	}
}

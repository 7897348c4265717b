package wire

import (
	"bytes"
	"unsafe"

	"github.com/tsdht/tsdht/internal/mp"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/vmihailenco/msgpack/v5"
)

// A subscribed series' every point goes to each of its subscriptions in a
// WatchNextResp: a thousand subscribers of a 60 Hz series are 60,000 batches a second
// to encode. The answer is therefore encoded and decoded by hand (package mp), byte
// for byte as msgpack/v5 would, as the write path's messages are (writecodec.go); the
// reader takes the forms written here and answers false for anything else, which the
// caller then decodes with rpc.Decode.

// runIdentity tells a run shared by several batches of one answer: the same key and
// the same points (the same arrays), as one notification's run delivered to many
// subscriptions of a session is.
type runIdentity struct {
	key     *byte
	klen, n int
	t, i    *int64
	f       *float64
	s       *string
	typ     series.Type
	late    bool
}

// encodedRuns remembers where in the answer the last few runs were encoded: a
// session's subscriptions of a few series share a few runs per notification.
type encodedRuns struct {
	id [8]runIdentity
	at [8][2]int
	n  int // runs remembered so far; the oldest is replaced
}

func (e *encodedRuns) find(id runIdentity) (int, int, bool) {
	for i := range min(e.n, len(e.id)) {
		if e.id[i] == id {
			return e.at[i][0], e.at[i][1], true
		}
	}
	return 0, 0, false
}

func (e *encodedRuns) add(id runIdentity, a, b int) {
	e.id[e.n%len(e.id)], e.at[e.n%len(e.id)] = id, [2]int{a, b}
	e.n++
}

func identify(r *WatchRun) runIdentity {
	p := &r.Points
	return runIdentity{key: unsafe.StringData(r.Key), klen: len(r.Key), n: len(p.T), t: unsafe.SliceData(p.T),
		i: unsafe.SliceData(p.I), f: unsafe.SliceData(p.F), s: unsafe.SliceData(p.S), typ: p.Type, late: r.Late}
}

// AppendWatchNextResp appends resp's msgpack encoding to dst. A run that several
// batches share is encoded once and its bytes copied: the subscribers of one series
// polled together cost one encoding of each notification, not one each.
func AppendWatchNextResp(dst []byte, resp *WatchNextResp) []byte {
	var encoded encodedRuns
	share := len(resp.Subs)+len(resp.Groups) > 1
	fields := 1
	if len(resp.Groups) > 0 {
		fields++
	}
	if resp.Token != 0 {
		fields++
	}
	dst = mp.AppendMapLen(dst, fields)
	dst = mp.AppendStr(dst, "b")
	if resp.Subs == nil {
		dst = append(dst, 0xc0)
	} else {
		dst = mp.AppendArrayLen(dst, len(resp.Subs))
	}
	for i := range resp.Subs {
		b := &resp.Subs[i]
		fields := 3
		if b.Ended != "" {
			fields++
		}
		dst = mp.AppendMapLen(dst, fields)
		dst = mp.AppendStr(dst, "id")
		dst = mp.AppendUint(dst, b.ID)
		dst = mp.AppendStr(dst, "r")
		dst = appendWatchRuns(dst, b.Runs, share, &encoded)
		dst = mp.AppendStr(dst, "s")
		dst = mp.AppendUint(dst, b.Seen)
		if b.Ended != "" {
			dst = mp.AppendStr(dst, "e")
			dst = mp.AppendStr(dst, b.Ended)
		}
	}
	if len(resp.Groups) > 0 {
		dst = appendWatchGroups(dst, resp.Groups, share, &encoded)
	}
	if resp.Token != 0 {
		dst = mp.AppendStr(dst, "tok")
		dst = mp.AppendUint(dst, resp.Token)
	}
	return dst
}

// appendWatchGroups appends the groups of an answer, its key included.
func appendWatchGroups(dst []byte, groups []WatchGroup, share bool, encoded *encodedRuns) []byte {
	dst = mp.AppendStr(dst, "g")
	dst = mp.AppendArrayLen(dst, len(groups))
	for i := range groups {
		g := &groups[i]
		dst = mp.AppendMapLen(dst, 2)
		dst = mp.AppendStr(dst, "i")
		if g.IDsWire != nil {
			dst = append(dst, g.IDsWire...)
		} else {
			dst = AppendWatchIDs(dst, g.IDs)
		}
		dst = mp.AppendStr(dst, "r")
		dst = appendWatchRuns(dst, g.Runs, share, encoded)
	}
	return dst
}

// appendWatchRuns appends runs; with share, a run encoded before is copied.
func appendWatchRuns(dst []byte, runs []WatchRun, share bool, encoded *encodedRuns) []byte {
	if runs == nil {
		return append(dst, 0xc0)
	}
	dst = mp.AppendArrayLen(dst, len(runs))
	for j := range runs {
		r := &runs[j]
		var id runIdentity
		if share {
			id = identify(r)
			if a, b, ok := encoded.find(id); ok {
				dst = append(dst, dst[a:b]...)
				continue
			}
		}
		start := len(dst)
		fields := 2
		if r.Late {
			fields++
		}
		dst = mp.AppendMapLen(dst, fields)
		dst = mp.AppendStr(dst, "k")
		dst = mp.AppendStr(dst, r.Key)
		dst = mp.AppendStr(dst, "p")
		dst = series.AppendWire(dst, &r.Points)
		if r.Late {
			dst = mp.AppendStr(dst, "l")
			dst = append(dst, 0xc3)
		}
		if share {
			encoded.add(id, start, len(dst))
		}
	}
	return dst
}

// EncodeWatchNextResp returns resp's msgpack encoding.
func EncodeWatchNextResp(resp *WatchNextResp) ([]byte, error) {
	n := 16
	for i := range resp.Subs {
		n += 32 + len(resp.Subs[i].Ended)
		for j := range resp.Subs[i].Runs {
			n += 16 + len(resp.Subs[i].Runs[j].Key) + resp.Subs[i].Runs[j].Points.WireSize()
		}
	}
	for i := range resp.Groups {
		n += 16 + 9*len(resp.Groups[i].IDs) + len(resp.Groups[i].IDsWire)
		for j := range resp.Groups[i].Runs {
			n += 16 + len(resp.Groups[i].Runs[j].Key) + resp.Groups[i].Runs[j].Points.WireSize()
		}
	}
	return AppendWatchNextResp(make([]byte, 0, n), resp), nil
}

// ReadWatchNextResp decodes b, a WatchNextResp as AppendWatchNextResp writes it, into
// resp. It answers false for any other form, and for anything malformed: decode b
// with rpc.Decode then. What it allocates stays within rpc.DecodeCostFactor bytes per
// byte of b.
//
// A run whose bytes are those of a run decoded just before (the node encodes a run
// that several batches share once and copies its bytes) is not decoded again: the
// batches share the run decoded, its points included, as they shared it at the node.
func ReadWatchNextResp(b []byte, resp *WatchNextResp) bool {
	r := &mp.Reader{B: b}
	*resp = WatchNextResp{}
	var decoded decodedRuns
	return readFields(r, func(k []byte) bool {
		var ok bool
		switch string(k) { // no string made: compared in place
		case "b":
			resp.Subs, ok = readArray(r, len(b), func(sub *WatchBatch) bool { return readWatchBatch(r, sub, len(b), &decoded) })
		case "g":
			resp.Groups, ok = readArray(r, len(b), func(g *WatchGroup) bool { return readWatchGroup(r, g, len(b), &decoded) })
		case "tok":
			resp.Token, ok = r.Uint()
		}
		return ok
	}) && r.Left() == 0
}

func readWatchGroup(r *mp.Reader, g *WatchGroup, size int, decoded *decodedRuns) bool {
	return readFields(r, func(k []byte) bool {
		var ok bool
		switch string(k) { // no string made: compared in place
		case "i":
			g.IDs, ok = readArray(r, size, func(id *uint64) bool {
				var ok bool
				*id, ok = r.Uint()
				return ok
			})
		case "r":
			g.Runs, ok = readArray(r, size, func(run *WatchRun) bool { return decoded.read(r, run) })
		}
		return ok
	})
}

// readArray reads an array, or a nil, reading each element with read; it refuses an
// array whose elements would take more than rpc.DecodeCostFactor bytes per byte of
// the message (size).
func readArray[T any](r *mp.Reader, size int, read func(*T) bool) ([]T, bool) {
	var zero T
	n, isNil, ok := arrayOrNil(r, int(unsafe.Sizeof(zero)), size)
	if !ok || isNil {
		return nil, ok
	}
	out := make([]T, n)
	for i := range out {
		if !read(&out[i]) {
			return nil, false
		}
	}
	return out, true
}

// readString reads a string, copied out of the message.
func readString(r *mp.Reader) (string, bool) {
	s, ok := r.StrBytes()
	return string(s), ok
}

// readFields reads a map, handing each key to field, which reads its value. The key
// is the message's bytes, not a string: a poll names each of its cursors' two keys,
// and a string made of each would be an allocation per cursor.
func readFields(r *mp.Reader, field func(k []byte) bool) bool {
	m, ok := r.MapLen()
	if !ok {
		return false
	}
	for range m {
		k, ok := r.StrBytes()
		if !ok || !field(k) {
			return false
		}
	}
	return true
}

// arrayOrNil reads an array header, or a nil, refusing an array whose elements
// (elemBytes each in memory) would take more than rpc.DecodeCostFactor bytes per byte
// of the message (size).
func arrayOrNil(r *mp.Reader, elemBytes, size int) (n int, isNil, ok bool) {
	if r.Left() > 0 && r.B[r.Off] == 0xc0 {
		r.Off++
		return 0, true, true
	}
	n, ok = r.ArrayLen()
	return n, false, ok && n*elemBytes <= rpc.DecodeCostFactor*size
}

// decodedRuns remembers the last few runs decoded and the bytes they came from.
type decodedRuns struct {
	from [8][]byte
	run  [8]WatchRun
	n    int // runs remembered so far; the oldest is replaced
}

// read reads the run at r into run: from memory when its bytes are those of one
// remembered (msgpack is self-delimiting: the same bytes decode to the same run).
func (d *decodedRuns) read(r *mp.Reader, run *WatchRun) bool {
	rest := r.B[r.Off:]
	for i := range min(d.n, len(d.from)) {
		if bytes.HasPrefix(rest, d.from[i]) {
			*run = d.run[i]
			r.Off += len(d.from[i])
			return true
		}
	}
	start := r.Off
	if !readWatchRun(r, run) {
		return false
	}
	d.from[d.n%len(d.from)], d.run[d.n%len(d.from)] = r.B[start:r.Off], *run
	d.n++
	return true
}

func readWatchBatch(r *mp.Reader, b *WatchBatch, size int, decoded *decodedRuns) bool {
	return readFields(r, func(k []byte) bool {
		var ok bool
		switch string(k) { // no string made: compared in place
		case "id":
			b.ID, ok = r.Uint()
		case "s":
			b.Seen, ok = r.Uint()
		case "e":
			b.Ended, ok = readString(r)
		case "r":
			b.Runs, ok = readArray(r, size, func(run *WatchRun) bool { return decoded.read(r, run) })
		}
		return ok
	})
}

func readWatchRun(r *mp.Reader, run *WatchRun) bool {
	return readFields(r, func(k []byte) bool {
		var ok bool
		switch string(k) { // no string made: compared in place
		case "k":
			run.Key, ok = readString(r)
		case "p":
			ok = series.ReadWire(r, &run.Points)
		case "l":
			run.Late, ok = r.Bool()
		}
		return ok
	})
}

// DecodeWatchNextResp decodes a WatchNextResp: by hand when ReadWatchNextResp can,
// else with rpc.Decode (whose errors say what is wrong).
func DecodeWatchNextResp(b []byte, resp *WatchNextResp) error {
	if ReadWatchNextResp(b, resp) {
		return nil
	}
	*resp = WatchNextResp{}
	return rpc.Decode(b, resp)
}

// A poll names every subscription of its session with its cursor: a session of 100
// subscriptions polls after each notification, so its request too is encoded and
// decoded by hand, as its answer is.

// AppendWatchNextReq appends req's msgpack encoding to dst.
func AppendWatchNextReq(dst []byte, req *WatchNextReq) []byte {
	fields := 3
	if req.Close {
		fields++
	}
	if req.Groups {
		fields++
	}
	if req.Token != 0 {
		fields++
	}
	if req.LingerMillis != 0 {
		fields++
	}
	dst = mp.AppendMapLen(dst, fields)
	dst = mp.AppendStr(dst, "ses")
	dst = mp.AppendUint(dst, req.Session)
	dst = mp.AppendStr(dst, "c")
	if req.Cursors == nil {
		dst = append(dst, 0xc0)
	} else {
		dst = mp.AppendArrayLen(dst, len(req.Cursors))
		for _, c := range req.Cursors {
			dst = mp.AppendMapLen(dst, 2)
			dst = mp.AppendStr(dst, "id")
			dst = mp.AppendUint(dst, c.ID)
			dst = mp.AppendStr(dst, "s")
			dst = mp.AppendUint(dst, c.Seen)
		}
	}
	dst = mp.AppendStr(dst, "w")
	dst = mp.AppendInt(dst, req.WaitMillis)
	if req.Close {
		dst = mp.AppendStr(dst, "x")
		dst = append(dst, 0xc3)
	}
	if req.Groups {
		dst = mp.AppendStr(dst, "g")
		dst = append(dst, 0xc3)
	}
	if req.Token != 0 {
		dst = mp.AppendStr(dst, "tok")
		dst = mp.AppendUint(dst, req.Token)
	}
	if req.LingerMillis != 0 {
		dst = mp.AppendStr(dst, "lg")
		dst = mp.AppendInt(dst, req.LingerMillis)
	}
	return dst
}

// EncodeWatchNextReq returns req's msgpack encoding.
func EncodeWatchNextReq(req *WatchNextReq) ([]byte, error) {
	return AppendWatchNextReq(make([]byte, 0, 24+len(req.Cursors)*24), req), nil
}

// watchCursorBytes is what a decoded WatchCursor takes in memory.
const watchCursorBytes = int(unsafe.Sizeof(WatchCursor{}))

// ReadWatchNextReq decodes b, a WatchNextReq as AppendWatchNextReq writes it, into
// req. It answers false for any other form, and for anything malformed: decode b with
// rpc.Decode then. What it allocates stays within rpc.DecodeCostFactor bytes per byte
// of b. The cursors go to req.Cursors' array when it has room: a node decodes each of
// a session's polls into the request it decoded the last into.
func ReadWatchNextReq(b []byte, req *WatchNextReq) bool {
	r := &mp.Reader{B: b}
	reuse := req.Cursors[:0]
	*req = WatchNextReq{}
	return readFields(r, func(k []byte) bool {
		var ok bool
		switch string(k) { // no string made: compared in place
		case "ses":
			req.Session, ok = r.Uint()
		case "w":
			req.WaitMillis, ok = r.Int()
		case "x":
			req.Close, ok = r.Bool()
		case "g":
			req.Groups, ok = r.Bool()
		case "tok":
			req.Token, ok = r.Uint()
		case "lg":
			req.LingerMillis, ok = r.Int()
		case "c":
			var n int
			var isNil bool
			n, isNil, ok = arrayOrNil(r, watchCursorBytes, len(b))
			if !ok || isNil {
				req.Cursors = nil
				return ok
			}
			if reuse != nil && cap(reuse) >= n {
				req.Cursors = reuse[:n]
				clear(req.Cursors)
			} else {
				req.Cursors = make([]WatchCursor, n)
			}
			for i := range req.Cursors {
				c := &req.Cursors[i]
				if readCursor(r, c) {
					continue
				}
				if !readFields(r, func(k []byte) bool {
					var ok bool
					switch string(k) { // no string made: compared in place
					case "id":
						c.ID, ok = r.Uint()
					case "s":
						c.Seen, ok = r.Uint()
					}
					return ok
				}) {
					return false
				}
			}
		}
		return ok
	}) && r.Left() == 0
}

// cursorHead and cursorSeen are the bytes AppendWatchNextReq writes before a cursor's
// ID (a map of 2, the key "id") and before its Seen (the key "s").
var (
	cursorHead = []byte{0x82, 0xa2, 'i', 'd'}
	cursorSeen = []byte{0xa1, 's'}
)

// readCursor reads a cursor in the form AppendWatchNextReq writes it, and reports
// whether it did; when not, r is where it was, for readFields to read whatever form
// it is in.
func readCursor(r *mp.Reader, c *WatchCursor) bool {
	at := r.Off
	if !bytes.HasPrefix(r.B[r.Off:], cursorHead) {
		return false
	}
	r.Off += len(cursorHead)
	id, ok := r.Uint()
	if ok && bytes.HasPrefix(r.B[r.Off:], cursorSeen) {
		r.Off += len(cursorSeen)
		if seen, ok := r.Uint(); ok {
			c.ID, c.Seen = id, seen
			return true
		}
	}
	r.Off = at
	return false
}

// DecodeWatchNextReq decodes a WatchNextReq: by hand when ReadWatchNextReq can, else
// with rpc.Decode (whose errors say what is wrong).
func DecodeWatchNextReq(b []byte, req *WatchNextReq) error {
	if ReadWatchNextReq(b, req) {
		return nil
	}
	*req = WatchNextReq{}
	return rpc.Decode(b, req)
}

// A notification carries a coordinator's stored points of watched series to a node
// that watches them: one per written point, and one decoded by the node for each.
// It too is encoded and decoded by hand, as a poll's answer is.

// AppendWatchNotifyReq appends req's msgpack encoding to dst.
func AppendWatchNotifyReq(dst []byte, req *WatchNotifyReq) []byte {
	dst = mp.AppendMapLen(dst, 4)
	dst = mp.AppendStr(dst, "f")
	dst = mp.AppendStr(dst, req.From)
	dst = mp.AppendStr(dst, "e")
	dst = mp.AppendUint(dst, req.Epoch)
	dst = mp.AppendStr(dst, "s")
	dst = mp.AppendUint(dst, req.Seq)
	dst = mp.AppendStr(dst, "r")
	return appendWatchRuns(dst, req.Runs, false, nil)
}

// EncodeWatchNotifyReq returns req's msgpack encoding.
func EncodeWatchNotifyReq(req *WatchNotifyReq) ([]byte, error) {
	n := 48 + len(req.From)
	for i := range req.Runs {
		n += 16 + len(req.Runs[i].Key) + req.Runs[i].Points.WireSize()
	}
	return AppendWatchNotifyReq(make([]byte, 0, n), req), nil
}

// ReadWatchNotifyReq decodes b, a WatchNotifyReq as AppendWatchNotifyReq writes it,
// into req, copying what it keeps (b may be reused once it returns). It answers false
// for any other form, and for anything malformed: decode b with rpc.Decode then. What
// it allocates stays within rpc.DecodeCostFactor bytes per byte of b.
func ReadWatchNotifyReq(b []byte, req *WatchNotifyReq) bool {
	r := &mp.Reader{B: b}
	*req = WatchNotifyReq{}
	return readFields(r, func(k []byte) bool {
		var ok bool
		switch string(k) { // no string made: compared in place
		case "f":
			req.From, ok = readString(r)
		case "e":
			req.Epoch, ok = r.Uint()
		case "s":
			req.Seq, ok = r.Uint()
		case "r":
			req.Runs, ok = readArray(r, len(b), func(run *WatchRun) bool { return readWatchRun(r, run) })
		}
		return ok
	}) && r.Left() == 0
}

// DecodeWatchNotifyReq decodes a WatchNotifyReq: by hand when ReadWatchNotifyReq
// can, else with rpc.Decode (whose errors say what is wrong).
func DecodeWatchNotifyReq(b []byte, req *WatchNotifyReq) error {
	if ReadWatchNotifyReq(b, req) {
		return nil
	}
	*req = WatchNotifyReq{}
	return rpc.Decode(b, req)
}

// EncodedWatchNotify is req encoded by hand (AppendWatchNotifyReq), for rpc.Invoke
// and rpc.Encode to send as it is (msgpack.RawMessage).
func EncodedWatchNotify(req *WatchNotifyReq) msgpack.RawMessage {
	b, _ := EncodeWatchNotifyReq(req)
	return b
}

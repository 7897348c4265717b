package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"sync"

	"github.com/klauspost/compress/snappy"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tsdht/tsdht/internal/netyield"
	"github.com/tsdht/tsdht/tsdb/series"
)

// staleNaN is the bit pattern Prometheus writes to mark a series stale.
const staleNaN = 0x7ff0000000000002

func (h *Handler) servePromWrite(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, "POST")
		return
	}
	// The body first, under its own deadline and charged to the node's budgets, then
	// a write slot: a slow sender holds no slot (bodymeter.go).
	m := h.meter(w, r, "reading a remote write")
	if m == nil {
		return
	}
	defer m.done()
	buf := bodies.Get().(*bytes.Buffer)
	defer putBody(buf) // decodeWriteRequest copies what it keeps
	compressed, err := readBody(w, r, h.cfg.MaxBodyBytes, buf, m)
	if err != nil {
		bodyError(w, err)
		return
	}
	n, err := snappy.DecodedLen(compressed)
	if err != nil {
		httpError(w, http.StatusBadRequest, "body is not snappy-compressed (remote write sends snappy block format): "+err.Error())
		return
	}
	if int64(n) > h.cfg.MaxBodyBytes {
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("remote write request decompresses to %d bytes, at most %d accepted: lower queue_config.max_samples_per_send", n, h.cfg.MaxBodyBytes))
		return
	}
	// What it decompresses to, known from its header, is charged before anything is
	// decoded: decoding, counting and parsing it walk those bytes. A request the
	// budget has no room for is refused here, at the cost of its compressed bytes.
	if !m.take(w, int64(n), "decoding a remote write of "+mib(int64(n))) {
		return
	}
	if err := m.hold(int64(n)); err != nil {
		bodyError(w, err)
		return
	}
	if !h.acquireWrite(w, r) {
		return
	}
	defer h.releaseWrite()
	done := h.heavy(w, r, m.acct, m.charged, h.cfg.WriteQueueWait, http.StatusTooManyRequests, "decoding a remote write")
	if done == nil {
		return
	}
	batches, ok := h.decodePromWrite(w, compressed, m)
	done()
	if !ok {
		return
	}
	if !h.admit(w, batches) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.WriteTimeout)
	defer cancel()
	out := h.store(ctx, batches)
	h.m.pointsWritten.WithLabelValues("prometheus").Add(float64(out.stored))
	h.m.pointsDropped.WithLabelValues("prometheus").Add(float64(out.dropped))
	h.finishWrite(w, out, 0, "")
}

// decodePromWrite decompresses and decodes a remote write's body, refusing it (413) past
// MaxSamplesPerRemoteWrite or MaxSeriesPerWrite before decoding its series, and charges
// m the series it builds; ok is false when the request was answered.
func (h *Handler) decodePromWrite(w http.ResponseWriter, compressed []byte, m *meter) (batches []*seriesBatch, ok bool) {
	n, _ := snappy.DecodedLen(compressed) // checked by the caller
	c := writeCounter{maxSeries: h.cfg.MaxSeriesPerWrite, maxSamples: h.cfg.MaxSamplesPerRemoteWrite, total: n}
	buf := rawBodies.Get().(*[]byte)
	defer putRaw(buf)
	pace, paced := newHeavyPacer(), 0
	raw, err := decodeSnappy((*buf)[:0], compressed, func(out []byte, final bool) error {
		pace.Spend(len(out) - paced) // the bytes decoded, and counted next
		paced = len(out)
		return c.advance(out, final)
	})
	if cap(raw) > cap(*buf) {
		*buf = raw[:0]
	}
	switch {
	case errors.Is(err, errTooManySamples):
		h.m.refused.WithLabelValues("samples").Inc()
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("remote write request of more than %d samples (MaxSamplesPerRemoteWrite); nothing was stored: lower queue_config.max_samples_per_send", h.cfg.MaxSamplesPerRemoteWrite))
		return nil, false
	case errors.Is(err, errTooManySeriesRW):
		h.tooManySeries(w)
		return nil, false
	case errors.Is(err, errSnappyCorrupt):
		httpError(w, http.StatusBadRequest, err.Error())
		return nil, false
	case err != nil:
		httpError(w, http.StatusBadRequest, "remote write request: "+err.Error())
		return nil, false
	}
	batches, stale, err := decodeWriteRequest(raw, pace)
	m.charge(int64(len(batches)) * seriesCost)
	h.m.staleSkipped.Add(float64(stale))
	if err != nil {
		httpError(w, http.StatusBadRequest, "remote write request: "+err.Error())
		return nil, false
	}
	return batches, true
}

// rawBodies keeps the buffers remote writes are decompressed into for the next
// requests: decodeWriteRequest copies what it keeps, so a buffer is free once the
// request was decoded (or refused).
var rawBodies = sync.Pool{New: func() any { return new([]byte) }}

func putRaw(b *[]byte) {
	if cap(*b) <= maxPooledBody {
		rawBodies.Put(b)
	}
}

// forEachBytes calls f with each length-delimited field of the protobuf message b,
// skipping fields of other wire types; every length is checked against the bytes that
// remain before it is used.
func forEachBytes(b []byte, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if err := f(num, v); err != nil {
				return err
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

// decodeWriteRequest decodes a Prometheus remote-write WriteRequest (protobuf) into
// per-series batches, skipping stale markers (counted). Every length is checked
// against the bytes that remain before it is used. pace (nil: none) is spent a byte of
// b decoded, and seriesCost a series built.
func decodeWriteRequest(b []byte, pace *netyield.Pacer) (batches []*seriesBatch, stale int, err error) {
	byKey := make(map[string]*seriesBatch)
	err = forEachBytes(b, func(num protowire.Number, ts []byte) error {
		if num != 1 {
			return nil
		}
		s, err := decodeTimeSeries(ts, byKey, &batches, pace)
		stale += s
		return err
	})
	if err != nil {
		return nil, stale, err
	}
	return batches, stale, nil
}

func decodeTimeSeries(b []byte, byKey map[string]*seriesBatch, batches *[]*seriesBatch, pace *netyield.Pacer) (stale int, err error) {
	var labels []tagPair
	samples := 0
	err = forEachBytes(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			pace.Spend(len(v) + 2) // the label and its tag and length
			l, err := decodeLabel(v)
			if err != nil {
				return err
			}
			labels = append(labels, l)
		case 2:
			samples++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := sortTags(labels); err != nil {
		return 0, err
	}
	name := ""
	for _, l := range labels {
		if l.k == "__name__" {
			name = l.v
		}
	}
	if name == "" {
		return 0, errors.New("a time series without a __name__ label")
	}
	key := PromKey(name, labels)
	if err := series.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("series %.80q: %v", key, err)
	}
	bt := byKey[key]
	if bt == nil {
		pace.Spend(seriesCost)
		tags := make(map[string]string, len(labels))
		for _, l := range labels {
			tags[l.k] = l.v
		}
		bt = &seriesBatch{key: key, tags: tags, desc: fmt.Sprintf("series %q", key)}
		byKey[key] = bt
		*batches = append(*batches, bt)
	}
	bt.pts.T = slices.Grow(bt.pts.T, samples)
	bt.pts.F = slices.Grow(bt.pts.F, samples)
	err = forEachBytes(b, func(num protowire.Number, m []byte) error {
		if num != 2 {
			return nil
		}
		pace.Spend(len(m) + 2) // the sample and its tag and length
		v, t, err := decodeSample(m)
		if err != nil {
			return err
		}
		if math.Float64bits(v) == staleNaN {
			stale++
			return nil
		}
		if t > math.MaxInt64/1_000_000 || t < math.MinInt64/1_000_000 {
			return fmt.Errorf("sample timestamp %d ms is out of range", t)
		}
		bt.pts.AppendFloat(t*1_000_000, v)
		return nil
	})
	return stale, err
}

func decodeLabel(b []byte) (tagPair, error) {
	var l tagPair
	err := forEachBytes(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			l.k = string(v)
		case 2:
			l.v = string(v)
		}
		return nil
	})
	if err != nil {
		return l, err
	}
	if l.k == "" {
		return l, errors.New("a label without a name")
	}
	return l, nil
}

func decodeSample(b []byte) (v float64, t int64, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			x, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return 0, 0, protowire.ParseError(n)
			}
			v, b = math.Float64frombits(x), b[n:]
		case num == 2 && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, protowire.ParseError(n)
			}
			t, b = int64(x), b[n:]
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, 0, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return v, t, nil
}

// sortedPairs returns the pairs of m sorted by key.
func sortedPairs(m map[string]string) []tagPair {
	out := make([]tagPair, 0, len(m))
	for k, v := range m {
		out = append(out, tagPair{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k < out[j].k })
	return out
}

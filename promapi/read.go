package promapi

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"slices"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Remote read's limits and framing.
const (
	// maxReadQueries bounds the queries of one remote read request.
	maxReadQueries = 64
	// samplesPerChunk is how many samples one streamed XOR chunk holds, as Prometheus
	// cuts them.
	samplesPerChunk = 120
	// maxFrameBytes bounds the chunks of one streamed frame, as Prometheus' own
	// remote read server does; a series of more is sent in several frames.
	maxFrameBytes = 1 << 20

	streamedContentType = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// serveRead answers a remote read request (snappy-compressed protobuf ReadRequest):
// with streamed XOR chunks when the request accepts them first, else with samples.
func (h *Handler) serveRead(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed: remote read is a POST of a snappy-compressed ReadRequest", http.StatusMethodNotAllowed)
		return
	}
	req, status, err := h.decodeReadRequest(w, r)
	if err != nil {
		http.Error(w, err.Error(), status)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	streamed := false
	for _, t := range req.AcceptedResponseTypes {
		if t == prompb.ReadRequest_STREAMED_XOR_CHUNKS {
			streamed = true
			break
		}
		if t == prompb.ReadRequest_SAMPLES {
			break
		}
	}
	if len(req.AcceptedResponseTypes) > 0 && !streamed && !slices.Contains(req.AcceptedResponseTypes, prompb.ReadRequest_SAMPLES) {
		http.Error(w, fmt.Sprintf("none of the accepted response types %v is served: ask for SAMPLES or STREAMED_XOR_CHUNKS", req.AcceptedResponseTypes), http.StatusBadRequest)
		return
	}
	sets := make([]storage.SeriesSet, len(req.Queries))
	total := 0
	for i, q := range req.Queries {
		ms, err := fromLabelMatchers(q.Matchers)
		if err != nil {
			http.Error(w, fmt.Sprintf("query %d: %v", i, err), http.StatusBadRequest)
			return
		}
		qr, _ := h.q.Querier(q.StartTimestampMs, q.EndTimestampMs)
		ss := qr.Select(ctx, true, nil, ms...)
		// Select reads whole series; count what the answer will hold.
		var list []storage.Series
		for ss.Next() {
			s := ss.At()
			total += s.(*memSeries).Len()
			list = append(list, s)
		}
		if err := ss.Err(); err != nil {
			readError(w, err)
			return
		}
		if total > h.cfg.MaxSamples {
			readError(w, &LimitError{What: "samples", Limit: h.cfg.MaxSamples, Hint: "read a shorter range or fewer series"})
			return
		}
		sets[i] = &seriesSet{list: list}
	}
	if streamed {
		h.streamChunks(w, sets)
		return
	}
	resp := &prompb.ReadResponse{Results: make([]*prompb.QueryResult, len(sets))}
	for i, ss := range sets {
		res := &prompb.QueryResult{}
		for ss.Next() {
			s := ss.At().(*memSeries)
			ts := &prompb.TimeSeries{Labels: toLabels(s.lset), Samples: make([]prompb.Sample, len(s.s))}
			for j, f := range s.s {
				ts.Samples[j] = prompb.Sample{Timestamp: f.t, Value: f.v}
			}
			res.Timeseries = append(res.Timeseries, ts)
		}
		resp.Results[i] = res
	}
	b, err := resp.Marshal()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Header().Set("Content-Encoding", "snappy")
	w.Write(snappy.Encode(nil, b))
}

func readError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	if _, ok := err.(*LimitError); ok {
		status = http.StatusUnprocessableEntity
	}
	http.Error(w, err.Error(), status)
}

// decodeReadRequest reads, bounds and decodes the body.
func (h *Handler) decodeReadRequest(w http.ResponseWriter, r *http.Request) (*prompb.ReadRequest, int, error) {
	compressed, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("remote read request of more than %d bytes, or unreadable: %v", h.cfg.MaxBodyBytes, err)
	}
	n, err := snappy.DecodedLen(compressed)
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("body is not snappy-compressed (remote read sends snappy block format): %v", err)
	}
	if int64(n) > h.cfg.MaxBodyBytes {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("remote read request decompresses to %d bytes, at most %d accepted: send fewer queries", n, h.cfg.MaxBodyBytes)
	}
	raw, err := snappy.Decode(nil, compressed)
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("snappy: %v", err)
	}
	var req prompb.ReadRequest
	if err := req.Unmarshal(raw); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("remote read request: %v", err)
	}
	if len(req.Queries) > maxReadQueries {
		return nil, http.StatusBadRequest, fmt.Errorf("%d queries in one remote read request, at most %d: send them in several", len(req.Queries), maxReadQueries)
	}
	return &req, 0, nil
}

// streamChunks writes each series as XOR chunks of samplesPerChunk samples, in
// frames of at most maxFrameBytes of chunks: a uvarint length, the CRC-32C
// (Castagnoli, big-endian) of the message, the ChunkedReadResponse.
func (h *Handler) streamChunks(w http.ResponseWriter, sets []storage.SeriesSet) {
	w.Header().Set("Content-Type", streamedContentType)
	w.Header().Set("Content-Encoding", "")
	flusher, _ := w.(http.Flusher)
	var hdr [binary.MaxVarintLen64 + 4]byte
	frame := func(qi int, lset []prompb.Label, chunks []prompb.Chunk) error {
		msg := &prompb.ChunkedReadResponse{QueryIndex: int64(qi), ChunkedSeries: []*prompb.ChunkedSeries{{Labels: lset, Chunks: chunks}}}
		b, err := msg.Marshal()
		if err != nil {
			return err
		}
		n := binary.PutUvarint(hdr[:], uint64(len(b)))
		binary.BigEndian.PutUint32(hdr[n:], crc32.Checksum(b, castagnoli))
		if _, err := w.Write(hdr[:n+4]); err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	for qi, ss := range sets {
		for ss.Next() {
			s := ss.At().(*memSeries)
			lset := toLabels(s.lset)
			var chunks []prompb.Chunk
			size := 0
			for lo := 0; lo < len(s.s); lo += samplesPerChunk {
				hi := min(lo+samplesPerChunk, len(s.s))
				c := chunkenc.NewXORChunk()
				app, err := c.Appender()
				if err != nil {
					h.log.Warn("remote read: chunk appender", "err", err)
					return
				}
				for _, f := range s.s[lo:hi] {
					app.Append(0, f.t, f.v)
				}
				chunks = append(chunks, prompb.Chunk{MinTimeMs: s.s[lo].t, MaxTimeMs: s.s[hi-1].t, Type: prompb.Chunk_XOR, Data: c.Bytes()})
				size += len(c.Bytes())
				if size >= maxFrameBytes {
					if err := frame(qi, lset, chunks); err != nil {
						return // the client went away
					}
					chunks, size = nil, 0
				}
			}
			if len(chunks) > 0 {
				if err := frame(qi, lset, chunks); err != nil {
					return
				}
			}
		}
	}
}

// fromLabelMatchers converts remote read's matchers.
func fromLabelMatchers(pb []*prompb.LabelMatcher) ([]*labels.Matcher, error) {
	out := make([]*labels.Matcher, 0, len(pb))
	for _, m := range pb {
		var t labels.MatchType
		switch m.Type {
		case prompb.LabelMatcher_EQ:
			t = labels.MatchEqual
		case prompb.LabelMatcher_NEQ:
			t = labels.MatchNotEqual
		case prompb.LabelMatcher_RE:
			t = labels.MatchRegexp
		case prompb.LabelMatcher_NRE:
			t = labels.MatchNotRegexp
		default:
			return nil, fmt.Errorf("matcher of unknown type %d", m.Type)
		}
		lm, err := labels.NewMatcher(t, m.Name, m.Value)
		if err != nil {
			return nil, fmt.Errorf("matcher %s: %v", m.Name, err)
		}
		out = append(out, lm)
	}
	return out, nil
}

func toLabels(l labels.Labels) []prompb.Label {
	out := make([]prompb.Label, 0, l.Len())
	l.Range(func(l labels.Label) { out = append(out, prompb.Label{Name: l.Name, Value: l.Value}) })
	return out
}

// ReadFrames decodes a streamed remote read answer (STREAMED_XOR_CHUNKS) frame by
// frame, checking each frame's length (at most maxFrame bytes) and CRC-32C before
// decoding it, and calls fn with each series of each frame, its XOR chunks decoded.
func ReadFrames(r io.Reader, maxFrame int, fn func(query int64, lset []prompb.Label, samples []prompb.Sample) error) error {
	br := bufio.NewReader(r)
	for {
		n, err := binary.ReadUvarint(br)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("frame length: %w", err)
		}
		if n > uint64(maxFrame) {
			return fmt.Errorf("frame of %d bytes, at most %d expected", n, maxFrame)
		}
		var sum [4]byte
		if _, err := io.ReadFull(br, sum[:]); err != nil {
			return fmt.Errorf("frame checksum: %w", err)
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(br, msg); err != nil {
			return fmt.Errorf("frame of %d bytes: %w", n, err)
		}
		if crc32.Checksum(msg, castagnoli) != binary.BigEndian.Uint32(sum[:]) {
			return errors.New("frame checksum mismatch")
		}
		var cr prompb.ChunkedReadResponse
		if err := cr.Unmarshal(msg); err != nil {
			return fmt.Errorf("frame: %w", err)
		}
		for _, cs := range cr.ChunkedSeries {
			var samples []prompb.Sample
			for _, c := range cs.Chunks {
				if c.Type != prompb.Chunk_XOR {
					return fmt.Errorf("chunk of encoding %v: only XOR is read", c.Type)
				}
				ch, err := chunkenc.FromData(chunkenc.EncXOR, c.Data)
				if err != nil {
					return err
				}
				it := ch.Iterator(nil)
				for it.Next() == chunkenc.ValFloat {
					t, v := it.At()
					samples = append(samples, prompb.Sample{Timestamp: t, Value: v})
				}
				if err := it.Err(); err != nil {
					return err
				}
			}
			if err := fn(cr.QueryIndex, cs.Labels, samples); err != nil {
				return err
			}
		}
	}
}

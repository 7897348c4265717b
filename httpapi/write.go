package httpapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
	"golang.org/x/sync/errgroup"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
)

// seriesBatch is the points of one series in one write request.
type seriesBatch struct {
	key  string
	tags map[string]string
	pts  series.Points
	desc string // "field \"v\" on measurement \"m\"" for error messages
}

// writeOutcome sums up storing a request's batches.
type writeOutcome struct {
	stored  int
	dropped int
	reason  string // the first reason points were dropped
	fatal   error  // an error that is not the points' fault: the cluster failed
}

func (h *Handler) serveWrite(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, "POST")
		return
	}
	q := r.URL.Query()
	db := q.Get("db")
	if db == "" {
		httpError(w, http.StatusBadRequest, "database is required: add ?db=NAME")
		return
	}
	if strings.ContainsAny(db, "/#") {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("database name %q: '/' and '#' are not allowed in a database name (they separate the parts of a series key)", db))
		return
	}
	prec, err := parsePrecision(q.Get("precision"))
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	// The body first, under its own deadline and charged to the node's budgets, then
	// a write slot: a slow sender holds no slot (bodymeter.go).
	m := h.meter(w, r, "reading a write")
	if m == nil {
		return
	}
	defer m.done()
	buf := bodies.Get().(*bytes.Buffer)
	body, err := readBody(w, r, h.cfg.MaxBodyBytes, buf, m)
	if err != nil {
		putBody(buf)
		bodyError(w, err)
		return
	}
	if !h.acquireWrite(w, r) {
		putBody(buf)
		return
	}
	defer h.releaseWrite()
	done := h.heavy(w, r, m.acct, m.charged, h.cfg.WriteQueueWait, http.StatusTooManyRequests, "parsing a write")
	if done == nil {
		putBody(buf)
		return
	}
	lim := parseLimits{cache: h.series, maxSeries: h.cfg.MaxSeriesPerWrite, pace: newHeavyPacer()}
	lim.maxNew, lim.admitNew = h.newSeriesCheck()
	batches, parsed, dropped, reason, stopped, built := parseLinesCached(body, db, prec, h.nowFor(), lim)
	done()
	putBody(buf) // nothing parsed refers to it
	m.charge(int64(built) * seriesCost)
	if errors.Is(stopped, errTooManyInRequest) {
		h.tooManySeries(w)
		return
	}
	if stopped != nil {
		h.refuseNewSeries(w, stopped)
		return
	}
	if parsed == 0 && dropped > 0 {
		h.m.pointsDropped.WithLabelValues("influx").Add(float64(dropped))
		httpError(w, http.StatusBadRequest, reason)
		return
	}
	if !h.admit(w, batches) {
		// The node refused series the parse found in the cache of earlier requests'
		// series (a body of new series sent again: the cache keeps what a parse built,
		// admitted or not), so they were new after all: charged as built, else such a
		// body would cost its parse and the admission over and over for its bytes alone.
		m.charge(int64(len(batches)-built) * seriesCost)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.WriteTimeout)
	defer cancel()
	batches, conflicts, why, err := h.checkFieldTypes(ctx, batches)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, err.Error()+": nothing was stored; retry the write")
		return
	}
	if conflicts > 0 {
		dropped += conflicts
		if reason == "" {
			reason = why
		}
	}
	out := h.store(ctx, batches)
	h.m.pointsWritten.WithLabelValues("influx").Add(float64(out.stored))
	h.m.pointsDropped.WithLabelValues("influx").Add(float64(out.dropped + dropped))
	h.finishWrite(w, out, dropped, reason)
}

// finishWrite answers a write: 204, a partial write (400), or the cluster's failure.
func (h *Handler) finishWrite(w http.ResponseWriter, out writeOutcome, dropped int, reason string) {
	if out.fatal != nil {
		code := http.StatusInternalServerError
		switch errorCode(out.fatal) {
		case tsdb.CodeUnavailable, tsdb.CodePartial:
			code = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "1")
		}
		if errors.Is(out.fatal, context.DeadlineExceeded) {
			code = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "1")
		}
		httpError(w, code, fmt.Sprintf("write failed after %d points were acknowledged at write quorum (retrying the whole batch is harmless): %v", out.stored, out.fatal))
		return
	}
	if reason == "" {
		reason = out.reason
	}
	if total := dropped + out.dropped; total > 0 {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("partial write: %s dropped=%d", reason, total))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// store writes every batch: all in one WriteMany when the engine has it (one replica
// request per replica for the whole request, combined with the requests that arrive
// while one is in flight, combine_many.go), else one Write per series (combined with
// other requests' points of the series, combine.go), a bounded number at once.
func (h *Handler) store(ctx context.Context, batches []*seriesBatch) writeOutcome {
	var out writeOutcome
	if h.many != nil {
		ws := make([]SeriesWrite, len(batches))
		for i, b := range batches {
			ws[i] = SeriesWrite{Key: b.key, Tags: b.tags, Pts: b.pts}
		}
		for i, r := range h.many.write(ctx, ws) {
			out.add(batches[i], r.Stored, r.Err)
		}
		return out
	}
	var mu sync.Mutex
	g := new(errgroup.Group)
	g.SetLimit(h.cfg.SeriesPerWriteParallel)
	for _, b := range batches {
		g.Go(func() error {
			n, err := h.comb.write(ctx, b.key, b.tags, b.pts)
			mu.Lock()
			defer mu.Unlock()
			out.add(b, n, err)
			return nil
		})
	}
	_ = g.Wait()
	return out
}

// add counts what storing batch b did: n points stored, and err for the rest.
func (out *writeOutcome) add(b *seriesBatch, n int, err error) {
	out.stored += n
	if err == nil {
		return
	}
	switch errorCode(err) {
	case tsdb.CodeTypeMismatch, tsdb.CodeBadInput, tsdb.CodeExpired:
		out.dropped += b.pts.Len() - n
		if out.reason == "" {
			if errorCode(err) == tsdb.CodeTypeMismatch {
				out.reason = fmt.Sprintf("field type conflict: input %s: %v", b.desc, err)
			} else {
				out.reason = fmt.Sprintf("%s: %v", b.desc, err)
			}
		}
	default:
		if out.fatal == nil {
			out.fatal = err
		}
	}
}

// parsePrecision maps InfluxDB 1.x's precision parameter to nanoseconds per unit.
func parsePrecision(p string) (int64, error) {
	switch p {
	case "", "n", "ns":
		return 1, nil
	case "u", "us", "µ":
		return 1e3, nil
	case "ms":
		return 1e6, nil
	case "s":
		return 1e9, nil
	case "m":
		return 60e9, nil
	case "h":
		return 3600e9, nil
	}
	return 0, fmt.Errorf("precision %q: want n, u, ms, s, m or h", p)
}

// lineTime returns the line's timestamp in ns: its integer times unit, or now when
// the line has none.
func lineTime(dec *lineprotocol.Decoder, unit int64, now time.Time) (int64, error) {
	b, err := dec.TimeBytes()
	if err != nil {
		return 0, err
	}
	return timeOf(b, unit, now)
}

// timeOf returns the timestamp b (decimal, in units of unit ns) in ns, or now when b is nil.
func timeOf(b []byte, unit int64, now time.Time) (int64, error) {
	if b == nil {
		return now.UnixNano(), nil
	}
	v, ok := decimal(b)
	if !ok {
		var err error
		if v, err = strconv.ParseInt(string(b), 10, 64); err != nil {
			return 0, fmt.Errorf("timestamp %q: want an integer", b)
		}
	}
	if v > math.MaxInt64/unit || v < math.MinInt64/unit {
		return 0, fmt.Errorf("timestamp %d overflows nanoseconds since the epoch at this precision", v)
	}
	return v * unit, nil
}

// decimal parses an optionally negative decimal integer of at most 19 digits that fits
// an int64, the form of every timestamp, faster than strconv (a fifth of parsing went
// there); ok is false for anything else, which the caller hands to strconv.
func decimal(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for len(b) >= 8 { // 8 digits at a time: every line of a write carries a 19-digit timestamp
		v, ok := eightDigits(b)
		if !ok {
			return 0, false
		}
		u, b = u*1e8+v, b[8:]
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case !neg && u <= math.MaxInt64:
		return int64(u), true
	case neg && u <= math.MaxInt64+1:
		return int64(-u), true
	}
	return 0, false
}

// eightDigits reads b[:8] as eight decimal digits, all in one 64-bit word: every byte
// must be '0'..'9' (high nibble 3, and adding 6 to the low nibble carries nothing);
// then neighbouring digits, pairs and quads are combined by multiplication.
func eightDigits(b []byte) (uint64, bool) {
	v := binary.LittleEndian.Uint64(b)
	const hi, six, ascii = 0xF0F0F0F0F0F0F0F0, 0x0606060606060606, 0x3030303030303030
	if v&hi != ascii || (v+six)&hi != ascii {
		return 0, false
	}
	v = (v & 0x0F0F0F0F0F0F0F0F) * (10<<8 + 1) >> 8
	v = (v & 0x00FF00FF00FF00FF) * (100<<16 + 1) >> 16
	return (v & 0x0000FFFF0000FFFF) * (10000<<32 + 1) >> 32, true
}

func influxType(t series.Type) string {
	switch t {
	case series.Float:
		return "float"
	case series.Int:
		return "integer"
	case series.String:
		return "string"
	}
	return "unknown"
}

// lineAt returns line n (from 1) of body, cut to 256 bytes for an error message.
func lineAt(body []byte, n int) string {
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(body, '\n')
		if j < 0 {
			return ""
		}
		body = body[j+1:]
	}
	if j := bytes.IndexByte(body, '\n'); j >= 0 {
		body = body[:j]
	}
	if len(body) > 256 {
		return string(body[:256]) + "…"
	}
	return string(body)
}

package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/influxdata/influxql"
)

// result is one statement's answer, in InfluxDB 1.x's shape.
type result struct {
	StatementID int       `json:"statement_id"`
	Series      []*row    `json:"series,omitempty"`
	Messages    []message `json:"messages,omitempty"`
	Partial     bool      `json:"partial,omitempty"`
	Err         string    `json:"error,omitempty"`

	needsCatalog bool
	unsupported  bool           // the statement asks what tsdht does not answer: 400
	loc          *time.Location // tz(): times are written in this zone
}

// row is one series of a result.
type row struct {
	Name    string            `json:"name,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	Columns []string          `json:"columns"`
	Values  [][]any           `json:"values,omitempty"`
	Partial bool              `json:"partial,omitempty"`

	// table, when not nil, holds the values of a raw SELECT in place of Values; the
	// answer's encoder writes it from the points.
	table *rawTable
}

// boxed replaces r's table, if any, by the boxed values it holds, and returns them.
func (r *row) boxed() [][]any {
	if r.table != nil {
		r.Values, r.table = r.table.values(), nil
	}
	return r.Values
}

// len is the number of rows of values r holds.
func (r *row) len() int {
	if r.table != nil {
		return r.table.Len()
	}
	return len(r.Values)
}

// slice returns the row holding r's values [a, b).
func (r *row) slice(a, b int) *row {
	part := &row{Name: r.Name, Tags: r.Tags, Columns: r.Columns}
	if r.table != nil {
		part.table = r.table.slice(a, b)
	} else {
		part.Values = r.Values[a:b]
	}
	return part
}

func (h *Handler) serveQuery(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		methodNotAllowed(w, "GET, POST")
		return
	}
	// The node's work budget before the query is read, and before a slot: a flood is
	// refused without reading or waiting.
	acct := h.work.account(r)
	if spent := acct.check(0, "a query"); spent != nil {
		closeUnread(w, r)
		h.answerSpent(w, spent, http.StatusServiceUnavailable)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, h.cfg.MaxQueryBytes)
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("query body over %d bytes", h.cfg.MaxQueryBytes))
			return
		}
		httpError(w, http.StatusBadRequest, "reading the query: "+err.Error())
		return
	}
	qs := r.Form.Get("q")
	if qs == "" {
		httpError(w, http.StatusBadRequest, `missing required parameter "q"`)
		return
	}
	epoch := r.Form.Get("epoch")
	if _, ok := epochUnit(epoch); !ok {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("epoch %q: want h, m, s, ms, u or ns", epoch))
		return
	}
	chunked := r.Form.Get("chunked") == "true"
	chunkSize := 10000
	if cs := r.Form.Get("chunk_size"); cs != "" {
		n, err := strconv.Atoi(cs)
		if err != nil || n < 1 {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("chunk_size %q: want a positive integer", cs))
			return
		}
		chunkSize = n
	}
	acct.charge(int64(len(qs)))
	if !h.checkQuery(w, qs) {
		return
	}
	if !h.acquireQuery(w, r) {
		return
	}
	defer h.releaseQuery()
	done := h.heavy(w, r, acct, int64(len(qs)), h.cfg.QueryQueueWait, http.StatusServiceUnavailable, "a query")
	if done == nil {
		return
	}
	qc := h.newQueryCost(acct)
	defer qc.done()
	query, err := influxql.ParseQuery(qs)
	if err != nil {
		done()
		httpError(w, http.StatusBadRequest, "error parsing query: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
	defer cancel()
	db := r.Form.Get("db")
	now := h.nowFor()
	results := make([]*result, len(query.Statements))
	status := http.StatusOK
	held := 0 // values the answers of the statements so far hold
	for i, stmt := range query.Statements {
		res := h.heldTooMuch(held)
		if res == nil {
			res = h.execute(ctx, qc, stmt, db, now, r.Method == http.MethodGet)
		}
		held += resultValues(res)
		res.StatementID = i
		res.Err = h.timedOut(ctx, res.Err)
		results[i] = res
		switch {
		case res.unsupported:
			status = http.StatusBadRequest
		case res.needsCatalog && status == http.StatusOK:
			status = http.StatusNotImplemented
		}
		if res.Err != "" && i < len(query.Statements)-1 {
			// InfluxDB 1.x stops at a statement that fails and answers it, when others
			// follow, as "not executed"; a refusal keeps saying what tsdht does not answer.
			if !res.unsupported && !res.needsCatalog {
				res.Err = "not executed"
			}
			results = results[:i+1]
			break
		}
	}
	done() // the answer is written outside the gate: a client that reads it slowly holds no place
	csv := wantsCSV(r.Header.Get("Accept"))
	if csv {
		w.Header().Set("Content-Type", "text/csv")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	unit, _ := epochUnit(epoch)
	if r.Form.Get("pretty") == "true" && !chunked && !csv {
		writePretty(w, results, epoch)
		return
	}
	aw := newAnswerWriter(w, unit)
	defer aw.release()
	write := aw.answer
	if csv {
		aw.csv = &csvState{statementID: -1}
		write = aw.csvAnswer
	}
	if !chunked {
		write(results)
		return
	}
	for _, res := range results {
		for _, part := range chunk(res, chunkSize) {
			write([]*result{part})
			if aw.flush() != nil {
				return
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	}
}

// writePretty writes the answer indented, through encoding/json: for people reading
// it, not for speed.
func writePretty(w http.ResponseWriter, results []*result, epoch string) {
	for _, res := range results {
		for _, s := range res.Series {
			s.boxed()
		}
		formatTimes(res, epoch)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "    ")
	_ = enc.Encode(map[string]any{"results": results})
}

// chunk cuts a result into parts of at most size rows, as InfluxDB's chunked mode:
// every part but a series' last is marked partial.
func chunk(res *result, size int) []*result {
	if res.Err != "" || len(res.Series) == 0 {
		return []*result{res}
	}
	var out []*result
	for si, s := range res.Series {
		for lo := 0; ; {
			n := min(size, s.len()-lo)
			part := s.slice(lo, lo+n)
			lo += n
			part.Partial = lo < s.len()
			out = append(out, &result{StatementID: res.StatementID, Series: []*row{part}, loc: res.loc,
				Partial: part.Partial || si < len(res.Series)-1})
			if lo >= s.len() {
				break
			}
		}
	}
	return out
}

// execute runs one statement; its error goes into the result, as InfluxDB does.
// readOnly is true for a GET request.
func (h *Handler) execute(ctx context.Context, qc *queryCost, stmt influxql.Statement, db string, now time.Time, readOnly bool) *result {
	var (
		rows []*row
		msgs []message
		err  error
	)
	switch s := stmt.(type) {
	case *influxql.SelectStatement:
		if s.Target != nil {
			rows, msgs, err = h.execInto(ctx, qc, s, db, now, readOnly) // into.go
			break
		}
		rows, err = h.execSelect(ctx, qc, s, db, now)
	case *influxql.CreateDatabaseStatement:
		// Databases need no creating: a write names its database.
	case *influxql.ShowDatabasesStatement, *influxql.ShowMeasurementsStatement, *influxql.ShowTagKeysStatement,
		*influxql.ShowTagValuesStatement, *influxql.ShowFieldKeysStatement, *influxql.ShowSeriesStatement:
		rows, err = h.execShow(ctx, s, db)
	case *influxql.ShowSeriesCardinalityStatement, *influxql.ShowMeasurementCardinalityStatement, *influxql.ShowTagKeyCardinalityStatement,
		*influxql.ShowTagValuesCardinalityStatement, *influxql.ShowFieldKeyCardinalityStatement:
		rows, err = h.execCardinality(ctx, s, db)
	case *influxql.ShowRetentionPoliciesStatement:
		rpdb := db
		if s.Database != "" {
			rpdb = s.Database
		}
		if rpdb == "" {
			err = errDatabaseRequired
			break
		}
		if err = h.databaseExists(ctx, rpdb); err != nil {
			break
		}
		rows = []*row{{Columns: []string{"name", "duration", "shardGroupDuration", "replicaN", "default"},
			Values: [][]any{{"autogen", "0s", "168h0m0s", 1, true}}}}
	default:
		err = unsupported("%s (supported: SELECT, SHOW DATABASES/MEASUREMENTS/TAG KEYS/TAG VALUES/FIELD KEYS/SERIES/RETENTION POLICIES, SHOW … CARDINALITY, CREATE DATABASE)",
			strings.SplitN(stmt.String(), " ", 3)[0])
	}
	if err != nil {
		return &result{Err: err.Error(), needsCatalog: errors.Is(err, ErrNeedsCatalog), unsupported: errors.Is(err, errUnsupported)}
	}
	res := &result{Series: rows, Messages: msgs}
	if s, ok := stmt.(*influxql.SelectStatement); ok {
		res.loc = s.Location
	}
	return res
}

// epochUnit returns the nanoseconds per unit of the epoch parameter; 0 for RFC 3339.
func epochUnit(epoch string) (int64, bool) {
	switch epoch {
	case "":
		return 0, true
	case "ns", "n":
		return 1, true
	case "u", "µ", "us":
		return 1e3, true
	case "ms":
		return 1e6, true
	case "s":
		return 1e9, true
	case "m":
		return 60e9, true
	case "h":
		return 3600e9, true
	}
	return 0, false
}

// tsValue marks a time column value until formatTimes renders it.
type tsValue int64

// formatTimes renders the time column as InfluxDB does: RFC 3339 with nanoseconds,
// or integers in the epoch's unit.
func formatTimes(res *result, epoch string) {
	loc := res.loc
	if loc == nil {
		loc = time.UTC
	}
	unit, _ := epochUnit(epoch)
	for _, s := range res.Series {
		for _, v := range s.Values {
			for i, x := range v {
				t, ok := x.(tsValue)
				if !ok {
					continue
				}
				if unit == 0 {
					v[i] = time.Unix(0, int64(t)).In(loc).Format(time.RFC3339Nano)
				} else {
					v[i] = floorDiv(int64(t), unit)
				}
			}
		}
	}
}

// floorDiv is a / b rounded toward −∞.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

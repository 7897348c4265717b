package export

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tsdht/tsdht/httpapi"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// MaxRequests bounds the exports, and apart the imports, a node serves at once: each
// holds a read or a batch in memory. One more is answered 429 with Retry-After.
const MaxRequests = 2

// Mount serves /api/v1/export and /api/v1/import of h over eng (docs/export.md).
func Mount(h *httpapi.Handler, eng httpapi.Engine) {
	h.Handle("/api/v1/export", bounded(MaxRequests, func(w http.ResponseWriter, r *http.Request) { serveExport(eng, w, r) }))
	h.Handle("/api/v1/import", bounded(MaxRequests, func(w http.ResponseWriter, r *http.Request) { serveImport(eng, w, r) }))
}

// bounded serves at most n requests of fn at once and refuses more with 429.
func bounded(n int, fn http.HandlerFunc) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			fn(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			httpError(w, http.StatusTooManyRequests, fmt.Errorf("%d requests of %s are in progress, the most a node serves at once: retry when one ends", n, r.URL.Path))
		}
	})
}

// EngineSource is a Source over the HTTP surface's Engine.
type EngineSource struct{ Eng httpapi.Engine }

// Read implements Source.
func (s EngineSource) Read(ctx context.Context, key string, from, to int64) (series.Points, error) {
	return s.Eng.Read(ctx, key, from, to)
}

// Counts implements Source with the engine's aggregates, page by page when a range
// holds more windows than one answer does.
func (s EngineSource) Counts(ctx context.Context, key string, from, to, every int64, fn func(start, count int64) error) error {
	pageN := int64(math.MaxInt64)
	for lo := from; lo < to; {
		hi := agg.PageEnd(lo, to, every, pageN)
		_, ws, err := s.Eng.Aggregate(ctx, key, lo, hi, time.Duration(every))
		var tl *httpapi.TooLargeError
		if errors.As(err, &tl) && tl.MaxWindows < pageN {
			pageN = tl.MaxWindows
			continue
		}
		if errors.Is(err, httpapi.ErrStringSeries) {
			err = s.countPoints(ctx, key, lo, hi, every, fn)
		} else if err == nil {
			for i := range ws {
				if err = fn(ws[i].Start, ws[i].Count); err != nil {
					break
				}
			}
		}
		if err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// countPoints is Counts of a series of strings, which the engine does not aggregate:
// its points in [from, to) read and counted per window.
func (s EngineSource) countPoints(ctx context.Context, key string, from, to, every int64, fn func(start, count int64) error) error {
	p, err := s.Eng.Read(ctx, key, from, to)
	if err != nil {
		return err
	}
	for _, w := range agg.Windows(&p, from, to, every) {
		if err := fn(w.Start, w.Count); err != nil {
			return err
		}
	}
	return nil
}

// parseSelector turns one of VictoriaMetrics' match[] series selectors into tags to
// match: `name`, `{k="v",…}` or `name{k="v",…}` with equality matchers only (the
// name matches the __name__ tag).
func parseSelector(s string) ([]catalog.Tag, error) {
	s = strings.TrimSpace(s)
	name, rest, _ := strings.Cut(s, "{")
	var tags []catalog.Tag
	if name = strings.TrimSpace(name); name != "" {
		tags = append(tags, catalog.Tag{K: "__name__", V: name})
	}
	if rest == "" && !strings.Contains(s, "{") {
		return tags, nil
	}
	body, ok := strings.CutSuffix(strings.TrimSpace(rest), "}")
	if !ok {
		return nil, fmt.Errorf("match[] %q: missing }", s)
	}
	for body = strings.TrimSpace(body); body != ""; {
		k, after, ok := strings.Cut(body, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.HasSuffix(k, "!") || strings.HasPrefix(after, "~") {
			return nil, fmt.Errorf("match[] %q: only equality matchers k=\"v\" are supported (no !=, =~, !~)", s)
		}
		after = strings.TrimSpace(after)
		v, n, err := unquotePrefix(after)
		if err != nil {
			return nil, fmt.Errorf("match[] %q: label %s: %v", s, k, err)
		}
		tags = append(tags, catalog.Tag{K: k, V: v})
		body = strings.TrimPrefix(strings.TrimSpace(after[n:]), ",")
		body = strings.TrimSpace(body)
	}
	if len(tags) == 0 {
		return nil, fmt.Errorf("match[] %q selects every series: name a label", s)
	}
	return tags, nil
}

// nameAlternatives returns the tag matches a selector's name stands for: the
// __name__ tag (series of remote write), and, as VictoriaMetrics names InfluxDB's
// fields measurement_field, each split of the name at an underscore into the
// __measurement and __field tags of series of line protocol.
func nameAlternatives(tags []catalog.Tag) [][]catalog.Tag {
	out := [][]catalog.Tag{tags}
	for i, t := range tags {
		if t.K != "__name__" {
			continue
		}
		rest := append(append([]catalog.Tag(nil), tags[:i]...), tags[i+1:]...)
		for j := 1; j < len(t.V)-1; j++ {
			if t.V[j] == '_' {
				out = append(out, append(append([]catalog.Tag(nil), rest...),
					catalog.Tag{K: httpapi.TagMeasurement, V: t.V[:j]}, catalog.Tag{K: httpapi.TagField, V: t.V[j+1:]}))
			}
		}
	}
	return out
}

// unquotePrefix reads the double-quoted string s starts with, returning it and the
// bytes it took.
func unquotePrefix(s string) (string, int, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", 0, errors.New(`want a "quoted" value`)
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			v, err := strconv.Unquote(s[:i+1])
			return v, i + 1, err
		}
	}
	return "", 0, errors.New("unterminated quoted value")
}

// parseVMTime reads a start or end the way VictoriaMetrics does: unix seconds (with a
// fraction) or RFC 3339.
func parseVMTime(name, s string) (int64, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.Abs(f) > 9.2e9 {
			return 0, fmt.Errorf("%s=%s: out of range (unix seconds)", name, s)
		}
		return int64(math.Round(f * 1e9)), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want unix seconds or RFC 3339", name, s)
	}
	return t.UnixNano(), nil
}

// selectSeries lists the series an export request names: match[] selectors (a union),
// prefix=, and series= keys; sorted by key.
func selectSeries(ctx context.Context, eng httpapi.Engine, q map[string][]string) ([]Series, error) {
	seen := map[string]bool{}
	var out []Series
	add := func(match []catalog.Tag, prefix string, exact string) error {
		m := map[string]string{}
		for _, t := range match {
			m[t.K] = t.V
		}
		infos, err := eng.Series(ctx, httpapi.SeriesQuery{Match: m, Prefix: prefix})
		if err != nil {
			return err
		}
		for _, in := range infos {
			if seen[in.Key] || exact != "" && in.Key != exact {
				continue
			}
			seen[in.Key] = true
			s := Series{Key: in.Key, Type: in.Type}
			for k, v := range in.Tags {
				s.Tags = append(s.Tags, catalog.Tag{K: k, V: v})
			}
			sort.Slice(s.Tags, func(i, j int) bool { return s.Tags[i].K < s.Tags[j].K })
			out = append(out, s)
		}
		return nil
	}
	any := false
	for _, sel := range q["match[]"] {
		tags, err := parseSelector(sel)
		if err != nil {
			return nil, &badRequest{err}
		}
		any = true
		for _, alt := range nameAlternatives(tags) {
			if err := add(alt, "", ""); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range q["prefix"] {
		any = true
		if err := add(nil, p, ""); err != nil {
			return nil, err
		}
	}
	for _, k := range q["series"] {
		any = true
		if err := add(nil, k, k); err != nil {
			return nil, err
		}
	}
	if !any {
		return nil, &badRequest{errors.New("name the series: match[]={k=\"v\"}, prefix=P or series=KEY")}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

type badRequest struct{ error }

func httpError(w http.ResponseWriter, code int, err error) {
	http.Error(w, err.Error(), code)
}

func serveExport(eng httpapi.Engine, w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		httpError(w, http.StatusMethodNotAllowed, errors.New("use GET or POST"))
		return
	}
	if err := r.ParseForm(); err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	q := r.Form
	f, unit, err := formatArgs(q)
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	if q.Get("start") == "" {
		httpError(w, http.StatusBadRequest, errors.New("start is required (unix seconds or RFC 3339): an export reads its range window by window from where it starts"))
		return
	}
	from, err := parseVMTime("start", q.Get("start"))
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	to := time.Now().UnixNano()
	if e := q.Get("end"); e != "" {
		if to, err = parseVMTime("end", e); err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
	}
	if from > to {
		httpError(w, http.StatusBadRequest, fmt.Errorf("start %d is after end %d", from, to))
		return
	}
	ss, err := selectSeries(r.Context(), eng, q)
	var br *badRequest
	switch {
	case errors.As(err, &br):
		httpError(w, http.StatusBadRequest, err)
		return
	case errors.Is(err, httpapi.ErrNeedsCatalog):
		httpError(w, http.StatusNotImplemented, err)
		return
	case err != nil:
		httpError(w, http.StatusServiceUnavailable, err)
		return
	}
	if f == LP {
		// Refused before the first byte, as the writer would refuse it.
		if err := (&lpWriter{w: nil}).check(ss); err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
	}
	ctype := map[Format]string{LP: "text/plain; charset=utf-8", CSV: "text/csv; charset=utf-8", JSONL: "application/stream+json"}[f]
	w.Header().Set("Content-Type", ctype)
	wr, _ := NewWriter(w, f, Options{TimeUnit: unit})
	if _, err := Export(r.Context(), EngineSource{eng}, ss, from, to, wr, nil); err != nil {
		// The status is sent: end the stream with the error on a line of its own, so a
		// reader sees it was cut short.
		_ = wr.Close()
		fmt.Fprintf(w, "\nerror: export cut short: %v\n", err)
	}
}

// formatArgs reads the format (default jsonl) and time_unit (default ms) of a request.
func formatArgs(q url.Values) (Format, int64, error) {
	f, err := ParseFormat(or(q.Get("format"), "jsonl"))
	if err != nil {
		return "", 0, err
	}
	unit, err := timeUnit(or(q.Get("time_unit"), "ms"))
	return f, unit, err
}

// timeUnit parses a time unit name into nanoseconds.
func timeUnit(s string) (int64, error) {
	switch s {
	case "s":
		return 1e9, nil
	case "ms":
		return 1e6, nil
	case "us":
		return 1e3, nil
	case "ns":
		return 1, nil
	}
	return 0, fmt.Errorf("time unit %q: want s, ms, us or ns", s)
}

// TimeUnit is timeUnit for the CLI.
func TimeUnit(s string) (int64, error) { return timeUnit(s) }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func serveImport(eng httpapi.Engine, w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		w.Header().Set("Allow", "POST")
		httpError(w, http.StatusMethodNotAllowed, errors.New("use POST with a body of JSON lines"))
		return
	}
	q := r.URL.Query()
	f, unit, err := formatArgs(q)
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			httpError(w, http.StatusBadRequest, fmt.Errorf("gzip body: %v", err))
			return
		}
		defer gz.Close()
		body = gz
	}
	rd, _ := NewReader(body, f, Options{TimeUnit: unit, DB: q.Get("db")})
	st, err := Import(r.Context(), rd, EngineSink{eng}, nil)
	var ie *InputError
	switch {
	case err != nil && httpapi.RefuseBudget(w, err): // the node's budget of new series: 413 or 429
	case errors.As(err, &ie):
		httpError(w, http.StatusBadRequest, fmt.Errorf("%v (stored %d points before that)", err, st.Points))
	case err != nil:
		httpError(w, http.StatusServiceUnavailable, fmt.Errorf("%v (stored %d points before that)", err, st.Points))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// EngineSink writes an import through the HTTP surface's Engine.
type EngineSink struct{ Eng httpapi.Engine }

// Write implements Sink: one WriteMany when the engine has it, else one Write per series.
func (s EngineSink) Write(ctx context.Context, ws []Write) (int64, error) {
	var n int64
	if mw, ok := s.Eng.(httpapi.ManyWriter); ok {
		var errs []error
		rs := mw.WriteMany(ctx, ws)
		if len(rs) > 0 && rs[0].Err != nil && rs[0].Stored == 0 {
			var be *tsdb.BudgetError
			if errors.As(rs[0].Err, &be) {
				// The node's budget of new series refused the batch whole: one error, not
				// one per series.
				return 0, fmt.Errorf("%d series: %w", len(ws), be)
			}
		}
		for i, res := range rs {
			n += int64(res.Stored)
			if res.Err != nil {
				errs = append(errs, fmt.Errorf("series %q: %w", ws[i].Key, res.Err))
			}
		}
		return n, errors.Join(errs...)
	}
	for _, w := range ws {
		k, err := s.Eng.Write(ctx, w.Key, w.Tags, w.Pts)
		n += int64(k)
		if err != nil {
			return n, fmt.Errorf("series %q: %w", w.Key, err)
		}
	}
	return n, nil
}

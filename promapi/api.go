// Package promapi serves Prometheus' HTTP query API and remote read over a tsdht
// cluster, with the upstream PromQL engine (github.com/prometheus/prometheus/promql)
// evaluating queries over a storage.Queryable of the series catalog and reads, as
// Thanos, Cortex and M3 embed it:
//
//	GET|POST /api/v1/query, /api/v1/query_range     PromQL
//	GET|POST /api/v1/labels, /api/v1/label/<name>/values, /api/v1/series?match[]=…
//	GET      /api/v1/status/buildinfo, /api/v1/metadata (empty)
//	POST     /api/v1/read                            remote read (samples, streamed XOR chunks)
//
// A series written by remote write is the series Prometheus sent; one written by
// InfluxDB line protocol (/write) is `measurement_field{tags…, db="…"}`, as
// VictoriaMetrics names it (entryLabels).
package promapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// Config bounds what one request may cost. The zero value is the default.
type Config struct {
	// Timeout bounds one query's evaluation; 0 means 30 s.
	Timeout time.Duration
	// MaxSeries is the most series one selector selects; 0 means 10 000.
	MaxSeries int
	// MaxSamples is the most samples one selector reads, and the most the engine holds
	// at once for one query; 0 means 5 000 000.
	MaxSamples int
	// LookbackDelta is how far back an instant selector looks for a sample; 0 means
	// 5 minutes, as Prometheus.
	LookbackDelta time.Duration
	// MaxBodyBytes bounds a request body (a POSTed form or a remote read request);
	// 0 means 4 MiB.
	MaxBodyBytes int64
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.MaxSeries == 0 {
		c.MaxSeries = 10_000
	}
	if c.MaxSamples == 0 {
		c.MaxSamples = 5_000_000
	}
	if c.LookbackDelta == 0 {
		c.LookbackDelta = 5 * time.Minute
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 4 << 20
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Timeout < 0 || c.MaxSeries < 0 || c.MaxSamples < 0 || c.LookbackDelta < 0 || c.MaxBodyBytes < 0 {
		return errors.New("promapi: Timeout, MaxSeries, MaxSamples, LookbackDelta and MaxBodyBytes must not be negative")
	}
	return nil
}

// maxPoints is the most steps a range query may have per series, as in Prometheus.
const maxPoints = 11_000

// Handler serves the Prometheus API over a Backend.
type Handler struct {
	cfg    Config
	b      Backend
	q      *Queryable
	engine *promql.Engine
	log    *slog.Logger
}

// New returns the handler over b. logger may be nil.
func New(b Backend, cfg Config, logger *slog.Logger) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	eng := promql.NewEngine(promql.EngineOpts{
		Logger:               logger,
		MaxSamples:           cfg.MaxSamples,
		Timeout:              cfg.Timeout,
		LookbackDelta:        cfg.LookbackDelta,
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
	})
	return &Handler{cfg: cfg, b: b, q: NewQueryable(b, cfg.MaxSeries, cfg.MaxSamples), engine: eng, log: logger}, nil
}

// Queryable returns the storage.Queryable the handler evaluates PromQL over.
func (h *Handler) Queryable() storage.Queryable { return h.q }

// Mount registers the API's paths with mount (httpapi.Handler.Handle, which adds
// authentication and request metrics). page answers /api/v1/series without match[]:
// the node's page lists series with ?prefix= on the same path; nil answers such a
// request 400.
func (h *Handler) Mount(mount func(pattern string, handler http.Handler), page http.Handler) {
	mount("/api/v1/query", http.HandlerFunc(h.serveQuery))
	mount("/api/v1/query_range", http.HandlerFunc(h.serveQueryRange))
	mount("/api/v1/labels", http.HandlerFunc(h.serveLabels))
	mount("/api/v1/label/", http.HandlerFunc(h.serveLabelValues))
	mount("/api/v1/series", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if page != nil && r.Method == http.MethodGet && !r.URL.Query().Has("match[]") {
			page.ServeHTTP(w, r)
			return
		}
		h.serveSeries(w, r)
	}))
	mount("/api/v1/status/buildinfo", http.HandlerFunc(h.serveBuildInfo))
	mount("/api/v1/metadata", http.HandlerFunc(h.serveMetadata))
	mount("/api/v1/read", http.HandlerFunc(h.serveRead))
}

// apiError is an answer in Prometheus' error shape.
type apiError struct {
	status int
	typ    string // bad_data, execution, timeout, canceled, internal
	err    error
}

func badData(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "bad_data", fmt.Errorf(format, args...)}
}

type response struct {
	Status    string   `json:"status"`
	Data      any      `json:"data,omitempty"`
	ErrorType string   `json:"errorType,omitempty"`
	Error     string   `json:"error,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
	Infos     []string `json:"infos,omitempty"`
}

func respond(w http.ResponseWriter, data any, annos annotations.Annotations) {
	warns, infos := annos.AsStrings("", 10, 10)
	writeJSON(w, http.StatusOK, response{Status: "success", Data: data, Warnings: warns, Infos: infos})
}

func respondError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, response{Status: "error", ErrorType: e.typ, Error: e.err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// parseForm parses the query string and a POSTed form, the body bounded.
func (h *Handler) parseForm(w http.ResponseWriter, r *http.Request) *apiError {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		return &apiError{http.StatusMethodNotAllowed, "bad_data", errors.New("method not allowed: use GET or POST")}
	}
	r.Body = http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	if err := r.ParseForm(); err != nil {
		return badData("form of more than %d bytes or malformed: %v", h.cfg.MaxBodyBytes, err)
	}
	return nil
}

// evalError maps an evaluation error to its status, as Prometheus does.
func evalError(err error) *apiError {
	var limit *LimitError
	switch {
	case errors.As(err, &limit):
		return &apiError{http.StatusUnprocessableEntity, "execution", err}
	case errors.As(err, new(promql.ErrQueryCanceled)):
		return &apiError{http.StatusServiceUnavailable, "canceled", err}
	case errors.As(err, new(promql.ErrQueryTimeout)):
		return &apiError{http.StatusServiceUnavailable, "timeout", err}
	case errors.As(err, new(promql.ErrStorage)):
		return &apiError{http.StatusInternalServerError, "internal", err}
	}
	return &apiError{http.StatusUnprocessableEntity, "execution", err}
}

type queryData struct {
	ResultType parser.ValueType `json:"resultType"`
	Result     parser.Value     `json:"result"`
}

func (h *Handler) serveQuery(w http.ResponseWriter, r *http.Request) {
	if e := h.parseForm(w, r); e != nil {
		respondError(w, e)
		return
	}
	ts := time.Now()
	if s := r.FormValue("time"); s != "" {
		t, err := parseTime(s)
		if err != nil {
			respondError(w, badData("time: %v", err))
			return
		}
		ts = t
	}
	ctx, cancel, opts, e := h.prepare(r)
	if e != nil {
		respondError(w, e)
		return
	}
	defer cancel()
	q, err := h.engine.NewInstantQuery(ctx, h.q, opts, r.FormValue("query"), ts)
	h.run(w, ctx, q, err)
}

func (h *Handler) serveQueryRange(w http.ResponseWriter, r *http.Request) {
	if e := h.parseForm(w, r); e != nil {
		respondError(w, e)
		return
	}
	start, err := parseTime(r.FormValue("start"))
	if err != nil {
		respondError(w, badData("start: %v", err))
		return
	}
	end, err := parseTime(r.FormValue("end"))
	if err != nil {
		respondError(w, badData("end: %v", err))
		return
	}
	if end.Before(start) {
		respondError(w, badData("end timestamp must not be before start time"))
		return
	}
	step, err := parseDuration(r.FormValue("step"))
	if err != nil {
		respondError(w, badData("step: %v", err))
		return
	}
	if step <= 0 {
		respondError(w, badData("zero or negative query resolution step widths are not accepted. Try a positive integer"))
		return
	}
	if end.Sub(start)/step > maxPoints {
		respondError(w, badData("exceeded maximum resolution of %d points per timeseries. Try decreasing the query resolution (?step=XX)", maxPoints))
		return
	}
	ctx, cancel, opts, e := h.prepare(r)
	if e != nil {
		respondError(w, e)
		return
	}
	defer cancel()
	q, err := h.engine.NewRangeQuery(ctx, h.q, opts, r.FormValue("query"), start, end, step)
	h.run(w, ctx, q, err)
}

// prepare bounds a query by the request's timeout= (at most Config.Timeout) and
// reads its lookback_delta=.
func (h *Handler) prepare(r *http.Request) (context.Context, context.CancelFunc, promql.QueryOpts, *apiError) {
	timeout := h.cfg.Timeout
	if s := r.FormValue("timeout"); s != "" {
		d, err := parseDuration(s)
		if err != nil || d <= 0 {
			return nil, nil, nil, badData("timeout %q: give a positive duration such as 10s", s)
		}
		timeout = min(timeout, d)
	}
	var lookback time.Duration
	if s := r.FormValue("lookback_delta"); s != "" {
		d, err := parseDuration(s)
		if err != nil || d < 0 {
			return nil, nil, nil, badData("lookback_delta %q: give a duration such as 5m", s)
		}
		lookback = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	return ctx, cancel, promql.NewPrometheusQueryOpts(false, lookback, nil), nil
}

func (h *Handler) run(w http.ResponseWriter, ctx context.Context, q promql.Query, err error) {
	if err != nil {
		respondError(w, badData("%v", err))
		return
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		respondError(w, evalError(res.Err))
		return
	}
	respond(w, queryData{ResultType: res.Value.Type(), Result: res.Value}, res.Warnings)
}

// promqlParser parses match[] selectors as the engine parses queries.
var promqlParser = parser.NewParser(parser.Options{})

// minTime and maxTime bound the ms timestamps a request may name: those whose ns
// fit in an int64.
const (
	minTime = math.MinInt64 / int64(time.Millisecond)
	maxTime = math.MaxInt64/int64(time.Millisecond) - 1
)

// matchers parses the match[] selectors of a request.
func matchers(r *http.Request) ([][]*labels.Matcher, *apiError) {
	var out [][]*labels.Matcher
	for _, s := range r.Form["match[]"] {
		ms, err := promqlParser.ParseMetricSelector(s)
		if err != nil {
			return nil, badData("match[] %q: %v", s, err)
		}
		out = append(out, ms)
	}
	return out, nil
}

// timeRange parses start= and end=, all time without them.
func timeRange(r *http.Request) (mint, maxt int64, e *apiError) {
	mint, maxt = minTime, maxTime
	if s := r.FormValue("start"); s != "" {
		t, err := parseTime(s)
		if err != nil {
			return 0, 0, badData("start: %v", err)
		}
		mint = max(mint, t.UnixMilli())
	}
	if s := r.FormValue("end"); s != "" {
		t, err := parseTime(s)
		if err != nil {
			return 0, 0, badData("end: %v", err)
		}
		maxt = min(maxt, t.UnixMilli())
	}
	return mint, maxt, nil
}

func limitParam(r *http.Request) (int, *apiError) {
	s := r.FormValue("limit")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, badData("limit %q: a non-negative integer", s)
	}
	return n, nil
}

// labelReq is what /labels, /label/<n>/values and /series share.
type labelReq struct {
	qr         storage.Querier
	sets       [][]*labels.Matcher
	limit      int
	mint, maxt int64
	ctx        context.Context
	cancel     context.CancelFunc
}

// labelRequest parses a labelReq and opens a querier over its range.
func (h *Handler) labelRequest(w http.ResponseWriter, r *http.Request) (*labelReq, *apiError) {
	if e := h.parseForm(w, r); e != nil {
		return nil, e
	}
	var (
		lr labelReq
		e  *apiError
	)
	if lr.mint, lr.maxt, e = timeRange(r); e != nil {
		return nil, e
	}
	if lr.sets, e = matchers(r); e != nil {
		return nil, e
	}
	if lr.limit, e = limitParam(r); e != nil {
		return nil, e
	}
	lr.qr, _ = h.q.Querier(lr.mint, lr.maxt)
	lr.ctx, lr.cancel = context.WithTimeout(r.Context(), h.cfg.Timeout)
	return &lr, nil
}

// union calls fn once per match[] set, or once without matchers if there is none,
// and returns the union of the sorted answers, at most limit of them (0: all).
func union(sets [][]*labels.Matcher, limit int, fn func(ms []*labels.Matcher) ([]string, error)) ([]string, error) {
	if len(sets) == 0 {
		sets = [][]*labels.Matcher{nil}
	}
	seen := make(map[string]struct{})
	for _, ms := range sets {
		vs, err := fn(ms)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			seen[v] = struct{}{}
		}
	}
	return sortedLimited(seen, &storage.LabelHints{Limit: limit}), nil
}

func (h *Handler) serveLabels(w http.ResponseWriter, r *http.Request) {
	h.serveStrings(w, r, func(lr *labelReq, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
		return lr.qr.LabelNames(lr.ctx, nil, ms...)
	})
}

func (h *Handler) serveLabelValues(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/api/v1/label/"), "/values")
	if !ok || name == "" || strings.Contains(name, "/") {
		respondError(w, &apiError{http.StatusNotFound, "bad_data", fmt.Errorf("%s: not found: ask /api/v1/label/<name>/values", r.URL.Path)})
		return
	}
	if strings.HasPrefix(name, "U__") {
		name = model.UnescapeName(name, model.ValueEncodingEscaping)
	}
	h.serveStrings(w, r, func(lr *labelReq, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
		return lr.qr.LabelValues(lr.ctx, name, nil, ms...)
	})
}

// serveStrings answers the union of list over the request's match[] sets.
func (h *Handler) serveStrings(w http.ResponseWriter, r *http.Request, list func(*labelReq, []*labels.Matcher) ([]string, annotations.Annotations, error)) {
	lr, e := h.labelRequest(w, r)
	if e != nil {
		respondError(w, e)
		return
	}
	defer lr.cancel()
	out, err := union(lr.sets, lr.limit, func(ms []*labels.Matcher) ([]string, error) {
		vs, _, err := list(lr, ms)
		return vs, err
	})
	if err != nil {
		respondError(w, evalError(err))
		return
	}
	respond(w, out, nil)
}

func (h *Handler) serveSeries(w http.ResponseWriter, r *http.Request) {
	lr, e := h.labelRequest(w, r)
	if e != nil {
		respondError(w, e)
		return
	}
	defer lr.cancel()
	if len(lr.sets) == 0 {
		respondError(w, badData("no match[] parameter provided"))
		return
	}
	var out []labels.Labels
	seen := make(map[string]bool)
	for _, ms := range lr.sets {
		ss := lr.qr.Select(lr.ctx, true, &storage.SelectHints{Start: lr.mint, End: lr.maxt, Func: "series"}, ms...)
		for ss.Next() {
			l := ss.At().Labels()
			if k := l.String(); !seen[k] {
				seen[k] = true
				out = append(out, l)
			}
		}
		if err := ss.Err(); err != nil {
			respondError(w, evalError(err))
			return
		}
	}
	slices.SortFunc(out, labels.Compare)
	if lr.limit > 0 && len(out) > lr.limit {
		out = out[:lr.limit]
	}
	if out == nil {
		out = []labels.Labels{}
	}
	respond(w, out, nil)
}

// Version is the Prometheus API version /api/v1/status/buildinfo reports, the one
// whose query API this package serves (its PromQL engine's).
const Version = "3.16.0"

func (h *Handler) serveBuildInfo(w http.ResponseWriter, r *http.Request) {
	respond(w, map[string]string{"version": Version, "revision": "", "branch": "tsdht", "buildUser": "", "buildDate": "", "goVersion": ""}, nil)
}

// serveMetadata answers that no metric has metadata: tsdht keeps no TYPE or HELP.
func (h *Handler) serveMetadata(w http.ResponseWriter, r *http.Request) {
	respond(w, map[string]any{}, nil)
}

// parseTime parses a Prometheus API time: Unix seconds (fractions allowed) or RFC 3339.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("missing: give Unix seconds or an RFC 3339 time")
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 9e9 {
			return time.Time{}, fmt.Errorf("%q is out of range", s)
		}
		// As Prometheus: whole milliseconds, so that 1.425 is not 1.424999.
		sec, frac := math.Modf(f)
		frac = math.Round(frac*1000) / 1000
		return time.Unix(int64(sec), int64(frac*float64(time.Second))).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp: give Unix seconds or an RFC 3339 time", s)
	}
	return t, nil
}

// parseDuration parses a Prometheus API duration: seconds (fractions allowed) or a
// Prometheus duration such as 1m30s.
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("missing: give seconds or a duration such as 15s")
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > float64(math.MaxInt64/int64(time.Second)) {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := model.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("cannot parse %q to a valid duration: give seconds or a duration such as 15s", s)
	}
	return time.Duration(d), nil
}

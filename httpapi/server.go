package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Handler serves the HTTP API over an Engine.
type Handler struct {
	cfg    Config
	eng    Engine
	log    *slog.Logger
	mux    *http.ServeMux
	slots  chan struct{} // write requests in progress
	qslots chan struct{} // queries in progress
	comb   *combiner
	// The node-wide budgets (workbudget.go): HTTP work over time, the bodies being
	// read, the points and windows queries hold.
	work              *workBudget
	bodyMem, queryMem *memPool
	gate              *heavyGate    // nil without a work budget
	many              *manyCombiner // nil: the engine has no WriteMany
	series            *seriesCache  // the series of line protocol's common lines, across requests
	ftypes            *fieldTypes   // the type of each field of a measurement (fieldtypes.go)
	m                 *metrics
	reg               *prometheus.Registry
	nowFor            func() time.Time

	// tiesBySet, in the handler answering an outer statement over an aggregate
	// subquery's answer (execSubquery), orders raw rows of equal times by their tag
	// sets, as InfluxDB's stream of the inner answer holds them, not as its merge of
	// stored series would.
	tiesBySet bool
}

// New returns the handler of the HTTP API over eng. logger may be nil.
func New(eng Engine, cfg Config, logger *slog.Logger) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: cfg, eng: eng, log: logger, mux: http.NewServeMux(),
		slots: make(chan struct{}, cfg.MaxConcurrentWrites), qslots: make(chan struct{}, cfg.MaxConcurrentQueries), comb: newCombiner(eng), nowFor: time.Now}
	h.work = newWorkBudget(cfg.WorkBytesPerSecond, cfg.ClientShare)
	h.bodyMem, h.queryMem = newMemPool(cfg.MaxInflightBodyBytes), newMemPool(cfg.QueryMemoryBytes)
	h.gate = newHeavyGate(cfg)
	h.series = newSeriesCache()
	h.ftypes = newFieldTypes()
	if mw, ok := eng.(ManyWriter); ok {
		h.many = newManyCombiner(mw, writesInFlight)
	}
	h.reg = prometheus.NewRegistry()
	h.m = newMetrics(h.reg, eng)
	h.route("/ping", h.servePing)
	h.route("/health", h.serveHealth)
	h.route("/ready", h.serveReady)
	h.route("/write", h.serveWrite)
	h.route("/query", h.serveQuery)
	h.route("/api/v1/write", h.servePromWrite)
	h.route("/metrics", h.serveMetrics)
	h.mountStream()
	if cfg.Profiling {
		h.route("/debug/pprof/", pprof.Index)
		h.route("/debug/pprof/block", sampled("block", func(on bool) { runtime.SetBlockProfileRate(ifOn(on, 10_000)) }))
		h.route("/debug/pprof/mutex", sampled("mutex", func(on bool) { runtime.SetMutexProfileFraction(ifOn(on, 20)) }))
		h.route("/debug/pprof/profile", pprof.Profile)
		h.route("/debug/pprof/trace", pprof.Trace)
	}
	return h, nil
}

// sampled serves the block or mutex profile (name), which records nothing unless
// sampled: sample turns the sampling on (one blocking event per 10 µs blocked, one
// contended unlock in 20) for the request's ?seconds= and off after, so that a node
// pays for it only while it is profiled.
func sampled(name string, sample func(on bool)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("seconds") != "" {
			sample(true)
			defer sample(false)
		}
		pprof.Handler(name).ServeHTTP(w, r)
	}
}

func ifOn(on bool, rate int) int {
	if on {
		return rate
	}
	return 0
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// statusWriter records the status a handler sent, for the metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (the body deadline,
// bodymeter.go).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (h *Handler) route(path string, fn http.HandlerFunc) {
	h.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		sw.Header().Set("X-Influxdb-Version", h.cfg.Version)
		sw.Header().Set("X-Influxdb-Build", "OSS")
		if !openPaths[path] && !h.authorized(r) {
			closeUnread(sw, r) // refused before its body is read
			h.refuse(sw)
		} else {
			fn(sw, r)
		}
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		h.m.requests.WithLabelValues(path, strconv.Itoa(sw.code)).Inc()
		h.m.latency.WithLabelValues(path).Observe(time.Since(start).Seconds())
	})
}

func (h *Handler) servePing(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		methodNotAllowed(w, "GET, HEAD, POST")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) serveHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "pass", "message": "serving", "version": h.cfg.Version})
}

func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request) {
	if err := h.eng.Ready(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "fail", "message": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	httpError(w, http.StatusMethodNotAllowed, "method not allowed: use "+allow)
}

// httpError answers in InfluxDB 1.x's shape: {"error":"…"}.
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("X-Influxdb-Error", msg)
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// acquireWrite takes a write slot, waiting at most WriteQueueWait; false means the
// node is saturated and the caller was answered 429 with Retry-After.
func (h *Handler) acquireWrite(w http.ResponseWriter, r *http.Request) bool {
	if waitSlot(r.Context(), h.slots, h.cfg.WriteQueueWait) {
		return true
	}
	h.m.rejected.Inc()
	w.Header().Set("Retry-After", "1")
	httpError(w, http.StatusTooManyRequests, "too many writes in progress on this node ("+
		strconv.Itoa(h.cfg.MaxConcurrentWrites)+"): retry after 1 s, or spread writes over more nodes")
	return false
}

func (h *Handler) releaseWrite() { <-h.slots }

// waitSlot takes one of slots, waiting at most wait (or until ctx is done) when all
// are taken, and reports whether it got one.
func waitSlot(ctx context.Context, slots chan struct{}, wait time.Duration) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// Server returns an http.Server for the API on addr, with every timeout set: a
// client that sends its headers or body slowly cannot hold a connection for ever.
func (h *Handler) Server(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       5 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// Shutdown stops srv gracefully, waiting at most timeout for requests in progress.
func Shutdown(srv *http.Server, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return srv.Shutdown(ctx)
}

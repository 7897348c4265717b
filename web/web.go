// Package web serves a node's page: the cluster map (members, state, 160-bit IDs on a
// ring, shards, points, disk, under-replicated pairs), the shard balance across nodes, and
// a series browser whose plot asks for min/max/mean per pixel column, so it stays fast at
// any range. The page and its plotting library (uPlot, vendored from npm) are embedded in
// the binary: a substation has no internet. The JSON the page reads:
//
//	GET /api/v1/cluster                         members as the node sees them
//	GET /api/v1/series?prefix=P&match=k=v,…     series and their metadata, with a Catalog
//	GET /api/v1/agg?series=K&from=T&to=T&buckets=N   min/max/mean/count per bucket
//
// The package sits over tsdb's thin client interface (Backend); cmd/tsdht mounts it on
// the node's --http address.
package web

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

//go:embed assets
var assets embed.FS

// Backend is what the page needs of a cluster; *client.Client provides it.
type Backend interface {
	Status(ctx context.Context) ([]wire.NodeStats, error)
	Get(ctx context.Context, key string, from, to int64, opt wire.GetOptions) (wire.Result, error)
}

// Aggregator computes windowed partial aggregates at the replicas (tsdb/agg), so no point
// travels to the node serving the page; *client.Client is one. A Backend without it is
// read point by point and reduced here.
type Aggregator interface {
	AggWindows(ctx context.Context, key string, from, to, every int64, opt wire.GetOptions,
		fn func(wire.AggResult) error, progress func(done, total int64)) error
}

// SeriesInfo is what the page shows of a series: its catalog entry.
type SeriesInfo struct {
	Key         string            `json:"key"`
	Type        string            `json:"type"` // float, int, string
	Unit        string            `json:"unit,omitempty"`
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	NominalRate float64           `json:"nominal_rate,omitempty"` // samples/s; 0: not declared
	First       int64             `json:"first,omitempty"`        // earliest timestamp written, ns; 0: unknown
	Last        int64             `json:"last,omitempty"`         // latest timestamp written, ns; 0: unknown
}

// Catalog lists series with their metadata: the series catalog, adapted. Without one the
// page plots a typed key and shows no metadata.
type Catalog interface {
	// Series returns the series whose key starts with prefix and whose tags include
	// every pair of match, in key order.
	Series(ctx context.Context, prefix string, match map[string]string) ([]SeriesInfo, error)
}

// Config configures the handler. The zero value is the default.
type Config struct {
	// Timeout bounds each API request, all its backend calls included; 0 means 30 s.
	Timeout time.Duration
	// MaxBuckets is the most buckets one /api/v1/agg request may ask for; 0 means 4096.
	MaxBuckets int
	// Catalog lists series and their metadata for the picker; nil: none (a typed key).
	Catalog Catalog
	// MaxSeries is the most series /api/v1/series returns; 0 means 1000.
	MaxSeries int
	// Window is how much time /api/v1/agg reads and reduces at once (rounded up to whole
	// buckets): it bounds the points held in memory; 0 means 10 minutes.
	Window time.Duration
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.MaxBuckets == 0 {
		c.MaxBuckets = 4096
	}
	if c.MaxSeries == 0 {
		c.MaxSeries = 1000
	}
	if c.Window == 0 {
		c.Window = 10 * time.Minute
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Timeout < 0 || c.MaxBuckets < 0 || c.Window < 0 || c.MaxSeries < 0 {
		return errors.New("web: Timeout, MaxBuckets, MaxSeries and Window must not be negative")
	}
	return nil
}

// Handler returns the page and its API.
func Handler(b Backend, cfg Config) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	h := &handler{b: b, cfg: cfg}
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(sub))
	mux.HandleFunc("GET /api/v1/cluster", h.cluster)
	mux.HandleFunc("GET /api/v1/series", h.series)
	mux.HandleFunc("GET /api/v1/agg", h.agg)
	return mux, nil
}

type handler struct {
	b   Backend
	cfg Config
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// Member is one row of the cluster map.
type Member struct {
	NodeID    string `json:"node_id"` // 160-bit ID, 40 hex digits
	RPC       string `json:"rpc"`
	State     string `json:"state"`     // alive, suspect, leaving, dead, …
	Reachable bool   `json:"reachable"` // false: the numbers below are unknown, not zero
	Error     string `json:"error,omitempty"`
	Shards    int    `json:"shards"`
	Series    int    `json:"series"`
	Points    int64  `json:"points"`
	Under     int64  `json:"under_replicated"`
	DiskBytes int64  `json:"disk_bytes"`
}

// Cluster is /api/v1/cluster's answer.
type Cluster struct {
	RF      int      `json:"rf"`
	Live    int      `json:"live"`
	Members []Member `json:"members"`
	Note    string   `json:"note,omitempty"` // e.g. fewer live members than rf
	// Uplinks has one row per reachable member and uplink it runs (docs/uplink.md):
	// what `tsdht status` and /metrics show of them.
	Uplinks []Uplink `json:"uplinks"`
}

// Uplink is one member's view of one uplink.
type Uplink struct {
	NodeID string `json:"node_id"`
	wire.UplinkStats
}

func (h *handler) cluster(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	nodes, err := h.b.Status(ctx)
	if err != nil {
		fail(w, http.StatusBadGateway, err)
		return
	}
	var out Cluster
	for _, n := range nodes {
		if n.Alive() {
			out.Live++
		}
		if n.Reachable && n.RF > out.RF {
			out.RF = n.RF
		}
	}
	for _, n := range nodes {
		m := Member{NodeID: n.NodeID, RPC: n.RPCAddr, State: string(n.State), Reachable: n.Reachable, Error: n.Error,
			Shards: n.Shards, Series: n.Series, Points: n.Points, Under: n.Repair.UnderReplicated, DiskBytes: n.DiskBytes}
		if out.RF > 0 && out.Live < out.RF {
			m.Under = int64(n.Shards) // every pair has fewer than rf copies
		}
		out.Members = append(out.Members, m)
		if n.Reachable {
			for _, u := range n.Uplinks {
				out.Uplinks = append(out.Uplinks, Uplink{NodeID: n.NodeID, UplinkStats: u})
			}
		}
	}
	if out.Uplinks == nil {
		out.Uplinks = []Uplink{}
	}
	if out.RF > 0 && out.Live < out.RF {
		out.Note = fmt.Sprintf("%d members alive, fewer than rf %d: every shard has fewer than %d copies", out.Live, out.RF, out.RF)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) series(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Catalog == nil {
		writeJSON(w, http.StatusOK, map[string]any{"available": false, "series": []SeriesInfo{}})
		return
	}
	q := r.URL.Query()
	match := map[string]string{}
	if m := q.Get("match"); m != "" {
		for _, kv := range strings.Split(m, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				fail(w, http.StatusBadRequest, fmt.Errorf("match %q: want k=v[,k=v…]", m))
				return
			}
			match[k] = v
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	infos, err := h.cfg.Catalog.Series(ctx, q.Get("prefix"), match)
	if err != nil {
		fail(w, http.StatusBadGateway, err)
		return
	}
	more := len(infos) > h.cfg.MaxSeries
	if more {
		infos = infos[:h.cfg.MaxSeries]
	}
	writeJSON(w, http.StatusOK, map[string]any{"available": true, "series": infos, "truncated": more})
}

// meta returns the catalog's entry of key, or nil without a catalog or an entry.
func (h *handler) meta(ctx context.Context, key string) *SeriesInfo {
	if h.cfg.Catalog == nil {
		return nil
	}
	infos, err := h.cfg.Catalog.Series(ctx, key, nil)
	if err != nil {
		return nil
	}
	for i := range infos {
		if infos[i].Key == key {
			return &infos[i]
		}
	}
	return nil
}

// Agg is /api/v1/agg's answer: per non-empty bucket, its start (ns) and the min, max,
// mean and count of the points in it. Buckets are [k·every, (k+1)·every) for integers k,
// aligned to the epoch like `tsdht agg`'s windows, clipped to [from, to).
type Agg struct {
	Series  string      `json:"series"`
	Type    string      `json:"type"`
	From    int64       `json:"from"`
	To      int64       `json:"to"`
	Every   int64       `json:"every"`   // bucket width, ns
	Points  int         `json:"points"`  // points read in [from, to)
	Partial bool        `json:"partial"` // some shard had no reachable replica: the plot may have gaps
	T       []int64     `json:"t"`
	Min     []float64   `json:"min"`
	Max     []float64   `json:"max"`
	Mean    []float64   `json:"mean"`
	Count   []int       `json:"count"`
	Source  string      `json:"source"`         // "replicas": their partial aggregates; "points": read and reduced here
	Meta    *SeriesInfo `json:"meta,omitempty"` // the series' catalog entry, when there is a catalog
}

func (h *handler) agg(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := q.Get("series")
	if err := series.ValidateKey(key); err != nil {
		fail(w, http.StatusBadRequest, fmt.Errorf("series: %w", err))
		return
	}
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	to, err2 := strconv.ParseInt(q.Get("to"), 10, 64)
	if err1 != nil || err2 != nil || from >= to || to-from < 0 {
		fail(w, http.StatusBadRequest, errors.New("from and to: integer nanoseconds with from < to"))
		return
	}
	buckets, err := strconv.Atoi(q.Get("buckets"))
	if err != nil || buckets < 1 || buckets > h.cfg.MaxBuckets {
		fail(w, http.StatusBadRequest, fmt.Errorf("buckets: an integer 1..%d (the plot's width in pixels)", h.cfg.MaxBuckets))
		return
	}
	every := bucketWidth(from, to, buckets)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	acc := newReducer(key, from, to, every)
	if ag, ok := h.b.(Aggregator); ok {
		acc.a.Source = "replicas"
		err = ag.AggWindows(ctx, key, from, to, every, wire.GetOptions{AllowPartial: true}, func(res wire.AggResult) error {
			acc.addWindows(res.Type, res.Windows)
			acc.a.Partial = acc.a.Partial || res.Partial
			return nil
		}, nil)
	} else {
		acc.a.Source = "points"
		err = h.reducePoints(ctx, acc, key, from, to, every)
	}
	if err != nil {
		code := http.StatusBadGateway
		if strings.Contains(err.Error(), "unknown series") {
			code = http.StatusNotFound
		}
		fail(w, code, err)
		return
	}
	out := acc.done()
	out.Meta = h.meta(ctx, key)
	writeJSON(w, http.StatusOK, out)
}

// reducePoints reads the range a window of whole buckets at a time, reducing each to its
// buckets' partial aggregates (tsdb/agg) before the next, so a week of 60 Hz data costs
// one window of points in memory, not the week. The pages end on bucket boundaries: no
// bucket is split between two.
// bucketWidth returns the width of the buckets of a plot of [from, to) at most buckets
// wide: the least that fits them, rounded up to whole minutes, hours or days once it is
// that wide, so that the coordinator answers the buckets from rollups of those levels
// (docs/rollups.md) rather than from every quantum.
func bucketWidth(from, to int64, buckets int) int64 {
	every := (to - from + int64(buckets) - 1) / int64(buckets)
	for _, unit := range []int64{int64(24 * time.Hour), int64(time.Hour), int64(time.Minute)} {
		if every >= unit {
			if every <= math.MaxInt64-unit {
				every = (every + unit - 1) / unit * unit
			}
			break
		}
	}
	return every
}

func (h *handler) reducePoints(ctx context.Context, acc *reducer, key string, from, to, every int64) error {
	perPage := max(1, (int64(h.cfg.Window)+every-1)/every)
	var ws []agg.Window
	for lo := from; lo < to; {
		hi := agg.PageEnd(lo, to, every, perPage)
		res, err := h.b.Get(ctx, key, lo, hi, wire.GetOptions{AllowPartial: true})
		if err != nil {
			return err
		}
		ws = agg.AppendWindows(ws[:0], &res.Points, lo, hi, every)
		acc.addWindows(res.Points.Type, ws)
		acc.a.Partial = acc.a.Partial || res.Partial
		lo = hi
	}
	return nil
}

// reducer gathers buckets of width every, in time order: min, max and mean of each
// non-empty one. Strings have no numbers: only their counts.
type reducer struct {
	a Agg
}

func newReducer(key string, from, to, every int64) *reducer {
	return &reducer{a: Agg{Series: key, From: from, To: to, Every: every}}
}

// addWindows appends the aggregates of consecutive windows. A window holding NaN or ±Inf
// shows 0s: JSON has neither.
func (r *reducer) addWindows(typ series.Type, ws []agg.Window) {
	a := &r.a
	if len(ws) > 0 {
		a.Type = typ.String()
	}
	for i := range ws {
		p := &ws[i].Partial
		a.Points += int(p.Count)
		lo, hi, mean := p.Min, p.Max, p.Mean()
		if typ == series.Int {
			lo, hi = float64(p.IMin), float64(p.IMax)
		}
		if typ == series.String || !finite(lo) || !finite(hi) || !finite(mean) {
			lo, hi, mean = 0, 0, 0
		}
		a.T = append(a.T, ws[i].Start)
		a.Min = append(a.Min, lo)
		a.Max = append(a.Max, hi)
		a.Mean = append(a.Mean, mean)
		a.Count = append(a.Count, int(p.Count))
	}
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func (r *reducer) done() Agg {
	if r.a.Type == "" {
		r.a.Type = "unknown"
	}
	if r.a.Type == series.String.String() {
		r.a.Min, r.a.Max, r.a.Mean = nil, nil, nil
	}
	if r.a.T == nil { // [] rather than null for the page
		r.a.T, r.a.Min, r.a.Max, r.a.Mean, r.a.Count = []int64{}, []float64{}, []float64{}, []float64{}, []int{}
	}
	return r.a
}

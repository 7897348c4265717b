package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the HTTP surface's own counters; the node's come through nodeCollector.
type metrics struct {
	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	pointsWritten *prometheus.CounterVec
	pointsDropped *prometheus.CounterVec
	pointsRead    prometheus.Counter
	staleSkipped  prometheus.Counter
	rejected      prometheus.Counter
	refused       *prometheus.CounterVec // requests refused by a limit on their size or shape (limits.go)
}

func newMetrics(reg *prometheus.Registry, eng Engine) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tsdht_http_requests_total", Help: "HTTP requests served, by path and status code.",
		}, []string{"path", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tsdht_http_request_duration_seconds", Help: "Time to serve an HTTP request, by path.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"path"}),
		pointsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tsdht_http_points_written_total", Help: "Points stored at the write quorum through HTTP, by API (influx, prometheus).",
		}, []string{"api"}),
		pointsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tsdht_http_points_dropped_total", Help: "Points of HTTP writes refused (unparsable, type conflict, too far in the future), by API.",
		}, []string{"api"}),
		pointsRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tsdht_http_points_read_total", Help: "Points read from the cluster to answer /query.",
		}),
		staleSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tsdht_http_prometheus_stale_markers_skipped_total", Help: "Prometheus stale markers received by remote write and not stored.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tsdht_http_writes_rejected_total", Help: "Write requests refused with 429 because every write slot was busy.",
		}),
	}
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tsdht_http_requests_refused_total", Help: "Requests refused whole by a limit (limit = new_series, series, samples, query_size, query_depth, query_busy, query_timeout, budget, body_slow, body_memory, query_memory).",
	}, []string{"limit"})
	reg.MustRegister(m.requests, m.latency, m.pointsWritten, m.pointsDropped, m.pointsRead, m.staleSkipped, m.rejected, m.refused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&nodeCollector{eng: eng})
	return m
}

func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}

// nodeCollector exports the engine's Stats at each scrape.
type nodeCollector struct{ eng Engine }

var (
	descShards       = prometheus.NewDesc("tsdht_store_shards", "(shard, series) pairs held by this node.", nil, nil)
	descSeries       = prometheus.NewDesc("tsdht_store_series", "Series with a declared type held by this node.", nil, nil)
	descPoints       = prometheus.NewDesc("tsdht_store_points", "Points held by this node.", nil, nil)
	descDisk         = prometheus.NewDesc("tsdht_store_disk_bytes", "Bytes the store's files take on disk (0 for a store in memory).", nil, nil)
	descDropped      = prometheus.NewDesc("tsdht_store_dropped_quanta_total", "Quanta dropped by retention or the disk budget since the store opened.", nil, nil)
	descFlash        = prometheus.NewDesc("tsdht_store_flash_bytes_written_total", "Bytes the store wrote to flash since it opened: WAL, flushed and compacted tables (0 for a store in memory).", nil, nil)
	descAppended     = prometheus.NewDesc("tsdht_store_points_appended_total", "New points stored since the store opened; tsdht_store_flash_bytes_written_total over it is what a point costs the flash.", nil, nil)
	descBuffered     = prometheus.NewDesc("tsdht_store_buffered_appends_total", "Appends that waited in the store's write buffer (--sync batch or none) and reached the engine in a shared commit.", nil, nil)
	descDrains       = prometheus.NewDesc("tsdht_store_buffer_drains_total", "Commits that brought the store's write buffer to the engine; tsdht_store_buffered_appends_total over it is how many appends share one.", nil, nil)
	descCorrupt      = prometheus.NewDesc("tsdht_store_corruptions_total", "Reads that met damaged stored bytes (failed checksum or decode) since the store opened; each fails over to another replica.", nil, nil)
	descWALLost      = prometheus.NewDesc("tsdht_store_wal_lost_bytes", "Bytes of write-ahead log records found after a damaged one when the store opened, and so not replayed: acknowledged writes this node lost (repair refills them from the other replicas).", nil, nil)
	descRefilling    = prometheus.NewDesc("tsdht_store_refilling", "1 while this node, having lost acknowledged writes at start-up, waits for its peers' repair passes to refill it; 0 otherwise.", nil, nil)
	descReplicaReads = prometheus.NewDesc("tsdht_replica_read_requests_total", "Read and aggregate requests this node answered as a replica for other nodes' coordinators; a query over many series costs each node one per page.", nil, nil)
	descLive         = prometheus.NewDesc("tsdht_cluster_live_members", "Cluster members this node sees alive.", nil, nil)
	descPasses       = prometheus.NewDesc("tsdht_repair_passes_total", "Repair passes run.", nil, nil)
	descUnder        = prometheus.NewDesc("tsdht_repair_under_replicated_pairs", "Pairs held here with fewer than rf confirmed copies, at the last pass.", nil, nil)
	descHinted       = prometheus.NewDesc("tsdht_repair_hinted_points", "Points held for unreachable replicas, at the last pass.", nil, nil)
	descPushed       = prometheus.NewDesc("tsdht_repair_pushed_pairs_total", "Pairs pushed to owners that lacked them.", nil, nil)
	descPushedPts    = prometheus.NewDesc("tsdht_repair_pushed_points_total", "Points pushed to owners that lacked them.", nil, nil)
	descHanded       = prometheus.NewDesc("tsdht_repair_handed_off_pairs_total", "Pairs handed off to their owners and deleted here.", nil, nil)
	descReadRep      = prometheus.NewDesc("tsdht_read_repairs_total", "Shards repaired by reads this node coordinated.", nil, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descShards, descSeries, descPoints, descDisk, descDropped, descFlash, descAppended, descBuffered, descDrains, descCorrupt, descWALLost, descRefilling, descLive, descReplicaReads,
		descPasses, descUnder, descHinted, descPushed, descPushedPts, descHanded, descReadRep} {
		ch <- d
	}
	for _, d := range uplinkDescs {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.eng.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descShards, err)
		return
	}
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	k := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	g(descShards, float64(s.Shards))
	g(descSeries, float64(s.Series))
	g(descPoints, float64(s.Points))
	g(descDisk, float64(s.DiskBytes))
	k(descDropped, float64(s.Dropped))
	k(descFlash, float64(s.FlashBytesWritten))
	k(descAppended, float64(s.AppendedPoints))
	k(descBuffered, float64(s.BufferedAppends))
	k(descDrains, float64(s.BufferDrains))
	k(descCorrupt, float64(s.Corruptions))
	g(descWALLost, float64(s.WALBytesDropped))
	refilling := 0.0
	if s.Refilling {
		refilling = 1
	}
	g(descRefilling, refilling)
	g(descLive, float64(s.LiveMembers))
	k(descReplicaReads, float64(s.ReplicaReads))
	if s.RepairKnown {
		k(descPasses, float64(s.RepairPasses))
		g(descUnder, float64(s.UnderReplicated))
		g(descHinted, float64(s.HintedPoints))
		k(descPushed, float64(s.PushedPairs))
		k(descPushedPts, float64(s.PushedPoints))
		k(descHanded, float64(s.HandedOff))
		k(descReadRep, float64(s.ReadRepairs))
	}
	collectUplinks(ch, s.Uplinks)
}

// Package httpapi serves tsdht over HTTP in the dialects users' tools already speak:
// InfluxDB 1.x's /ping, /write (line protocol) and /query (InfluxQL), Prometheus remote
// write at /api/v1/write, the node's own metrics at /metrics, and /health and /ready.
//
// It sits above tsdb and talks to it only through Engine, a small facade: NodeEngine
// implements it over a running *tsdb.Node. Nothing below cmd imports this package.
package httpapi

import (
	"errors"
	"fmt"
	"time"
)

// Config tunes a Handler. The zero value of every field means its default
// (DefaultConfig); Validate refuses values that cannot work.
type Config struct {
	// MaxBodyBytes bounds a write request's body, after gzip decompression too: a
	// larger body is refused with 413 before it is parsed. Default 25 MiB, as
	// InfluxDB 1.x's max-body-size.
	MaxBodyBytes int64
	// MaxConcurrentWrites bounds the write requests (/write and /api/v1/write) being
	// read, parsed and stored at once. Each holds up to MaxBodyBytes plus its parsed
	// points, so this bounds the memory writes take. Default 4.
	MaxConcurrentWrites int
	// WriteQueueWait is how long a write request waits for one of the
	// MaxConcurrentWrites slots before it is refused with 429 and Retry-After. The
	// waiting request holds no body memory. Default 2s.
	WriteQueueWait time.Duration
	// MaxSeriesPerWrite bounds the series one write request (/write, /api/v1/write) may
	// name: parsing stops at the first line past it and the request is refused whole
	// with 413, nothing stored. Each series a request names costs memory while the
	// request is parsed and stored, whether or not the cluster knows it. Default 50,000.
	// (The series the node does not know yet are bounded further by the engine's
	// SeriesAdmitter: tsdb.Config.NewSeriesPerRequest.)
	MaxSeriesPerWrite int
	// MaxSamplesPerRemoteWrite bounds the samples of one Prometheus remote write,
	// counted in the decompressed request before any is decoded: 413 past it. Default
	// 1,000,000 (Prometheus sends max_samples_per_send, 2,000 by default, a request).
	MaxSamplesPerRemoteWrite int
	// SeriesPerWriteParallel bounds the series of one write request being stored at
	// once by an Engine without WriteMany (one Write per series; NodeEngine writes a
	// request's series in one WriteMany and does not use it). Default 256: a series' Put mostly waits
	// for the replicas' disk syncs, which the store shares among the appends that wait
	// at once, so the more series wait together the fewer syncs a request costs.
	SeriesPerWriteParallel int
	// MaxQueryPoints bounds the points one /query statement reads from the cluster;
	// past it the statement fails with an error naming the limit. Default 2,000,000
	// (about 32 MB decoded).
	MaxQueryPoints int
	// MaxQueryWindows bounds the GROUP BY time() windows of one statement, as
	// InfluxDB's max-select-buckets. Default 100,000.
	MaxQueryWindows int
	// MaxQueryBytes bounds a /query request's body (a POSTed q). Default 1 MiB.
	MaxQueryBytes int64
	// QueryTimeout bounds one /query request: a statement still running then fails with
	// an error naming it (`tsdht node --http-query-timeout`). Default 60s.
	QueryTimeout time.Duration
	// MaxQueryDepth bounds the nesting of parentheses in a query, counted before it is
	// parsed (the parser recurses once per level): 400 past it. Default 100.
	MaxQueryDepth int
	// MaxConcurrentQueries bounds the /query requests being executed at once
	// (`tsdht node --http-max-queries`); a query waits up to QueryQueueWait for a slot,
	// then is answered 503 with Retry-After. Default 4.
	MaxConcurrentQueries int
	// QueryQueueWait is how long a query waits for a slot. Default 2s.
	QueryQueueWait time.Duration
	// WriteTimeout bounds storing one write request once it was parsed. Default 30s.
	WriteTimeout time.Duration
	// BodyTimeout and BodyMinRate bound the time a write request's body may take to
	// arrive: BodyTimeout, plus one second for every BodyMinRate bytes that arrived
	// (`tsdht node --http-body-timeout`). A body still arriving then is refused with 408
	// and its connection closed. The body is read before the request takes a write
	// slot, so a slow sender holds only its own connection. Defaults 10s and 16 KiB a
	// second.
	BodyTimeout time.Duration
	BodyMinRate int64
	// MaxInflightBodyBytes bounds the bytes of the write requests' bodies the node holds
	// at once, arrived and decompressed, over all requests: a body that would take more
	// is refused with 429 and Retry-After. Default 64 MiB.
	MaxInflightBodyBytes int64
	// WorkBytesPerSecond is the node-wide budget of HTTP work, in bytes a second, that
	// every request's bytes (arrived, and decompressed) and every query's points
	// (128 bytes each) are charged to as the work is done (`tsdht node --http-budget`,
	// in MiB; workbudget.go). Once it is spent, writes are refused with 429 and queries
	// with 503, both with Retry-After, until it is paid back. Default -1: no budget, since
	// a budget also throttles an honest bulk load or a dashboard's long reads; set one
	// (e.g. 4 MiB a second) where untrusted clients reach the HTTP port.
	WorkBytesPerSecond int64
	// ClientShare is the fraction of WorkBytesPerSecond one client (one remote address)
	// may take, so that one client cannot spend the budget of all. Default 0.5.
	ClientShare float64
	// QueryMemoryBytes bounds the memory all /query statements hold at once in points
	// read (16 bytes each) and windows: a statement that would take more fails with an
	// error naming the limit (`tsdht node --http-query-memory`, in MiB). Default 64 MiB.
	QueryMemoryBytes int64
	// MaxHeavyRequests bounds, on a node with a work budget (WorkBytesPerSecond), the
	// requests parsing a write's body, decoding a remote write or executing a query at
	// once (heavy.go): a request waits for its turn up to its queue wait, then is refused
	// (429, a query 503) with Retry-After, and its client's budget is checked again once
	// it has it. Default GOMAXPROCS less one, at least one, so that the RPC writers always
	// find a CPU the HTTP requests do not hold. Without a budget nothing waits.
	MaxHeavyRequests int
	// Version is sent in X-Influxdb-Version (clients check it); default "1.8.10-tsdht".
	Version string
	// Tokens, when not empty, are the credentials every request but /ping, /health and
	// /ready must carry (auth.go); `tsdht node` derives them from its cluster key. Empty:
	// the API is open to whoever reaches the port.
	Tokens []string
	// Profiling serves Go's profiles (net/http/pprof) under /debug/pprof/, behind the
	// same tokens as the rest of the API. Off by default: a CPU profile costs the node
	// while it runs, as do /debug/pprof/block and /debug/pprof/mutex?seconds=N, which
	// sample blocking and lock contention (process-wide) for those N seconds. `tsdht node`
	// turns it on when TSDHT_HTTP_PPROF=1 is set.
	Profiling bool
}

// DefaultConfig returns the defaults, sized for a 512 MB edge board.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:             25 << 20,
		MaxConcurrentWrites:      4,
		WriteQueueWait:           2 * time.Second,
		SeriesPerWriteParallel:   256,
		MaxSeriesPerWrite:        50_000,
		MaxSamplesPerRemoteWrite: 1_000_000,
		MaxQueryDepth:            100,
		MaxConcurrentQueries:     4,
		QueryQueueWait:           2 * time.Second,
		MaxQueryPoints:           2_000_000,
		MaxQueryWindows:          100_000,
		MaxQueryBytes:            1 << 20,
		QueryTimeout:             60 * time.Second,
		WriteTimeout:             30 * time.Second,
		BodyTimeout:              10 * time.Second,
		BodyMinRate:              16 << 10,
		MaxInflightBodyBytes:     64 << 20,
		WorkBytesPerSecond:       -1,
		ClientShare:              0.5,
		QueryMemoryBytes:         64 << 20,
		MaxHeavyRequests:         defaultHeavy(),
		Version:                  "1.8.10-tsdht",
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.MaxConcurrentWrites == 0 {
		c.MaxConcurrentWrites = d.MaxConcurrentWrites
	}
	if c.WriteQueueWait == 0 {
		c.WriteQueueWait = d.WriteQueueWait
	}
	if c.SeriesPerWriteParallel == 0 {
		c.SeriesPerWriteParallel = d.SeriesPerWriteParallel
	}
	if c.MaxSeriesPerWrite == 0 {
		c.MaxSeriesPerWrite = d.MaxSeriesPerWrite
	}
	if c.MaxSamplesPerRemoteWrite == 0 {
		c.MaxSamplesPerRemoteWrite = d.MaxSamplesPerRemoteWrite
	}
	if c.MaxQueryDepth == 0 {
		c.MaxQueryDepth = d.MaxQueryDepth
	}
	if c.MaxConcurrentQueries == 0 {
		c.MaxConcurrentQueries = d.MaxConcurrentQueries
	}
	if c.QueryQueueWait == 0 {
		c.QueryQueueWait = d.QueryQueueWait
	}
	if c.MaxQueryPoints == 0 {
		c.MaxQueryPoints = d.MaxQueryPoints
	}
	if c.MaxQueryWindows == 0 {
		c.MaxQueryWindows = d.MaxQueryWindows
	}
	if c.MaxQueryBytes == 0 {
		c.MaxQueryBytes = d.MaxQueryBytes
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = d.QueryTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.Version == "" {
		c.Version = d.Version
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = d.BodyTimeout
	}
	if c.BodyMinRate == 0 {
		c.BodyMinRate = d.BodyMinRate
	}
	if c.MaxInflightBodyBytes == 0 {
		c.MaxInflightBodyBytes = d.MaxInflightBodyBytes
	}
	if c.WorkBytesPerSecond == 0 {
		c.WorkBytesPerSecond = d.WorkBytesPerSecond
	}
	if c.ClientShare == 0 {
		c.ClientShare = d.ClientShare
	}
	if c.QueryMemoryBytes == 0 {
		c.QueryMemoryBytes = d.QueryMemoryBytes
	}
	if c.MaxHeavyRequests == 0 {
		c.MaxHeavyRequests = d.MaxHeavyRequests
	}
	return c
}

// Validate reports a field that cannot work, naming it.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.MaxBodyBytes < 1 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes %d: must be positive", c.MaxBodyBytes))
	}
	if c.MaxConcurrentWrites < 1 {
		errs = append(errs, fmt.Errorf("MaxConcurrentWrites %d: must be positive", c.MaxConcurrentWrites))
	}
	if c.WriteQueueWait < 0 {
		errs = append(errs, fmt.Errorf("WriteQueueWait %v: must not be negative", c.WriteQueueWait))
	}
	if c.SeriesPerWriteParallel < 1 {
		errs = append(errs, fmt.Errorf("SeriesPerWriteParallel %d: must be positive", c.SeriesPerWriteParallel))
	}
	if c.MaxQueryPoints < 1 || c.MaxQueryWindows < 1 || c.MaxQueryBytes < 1 {
		errs = append(errs, errors.New("MaxQueryPoints, MaxQueryWindows and MaxQueryBytes must be positive"))
	}
	if c.MaxSeriesPerWrite < 1 || c.MaxSamplesPerRemoteWrite < 1 || c.MaxQueryDepth < 1 || c.MaxConcurrentQueries < 1 {
		errs = append(errs, fmt.Errorf("MaxSeriesPerWrite %d, MaxSamplesPerRemoteWrite %d, MaxQueryDepth %d and MaxConcurrentQueries %d must be positive",
			c.MaxSeriesPerWrite, c.MaxSamplesPerRemoteWrite, c.MaxQueryDepth, c.MaxConcurrentQueries))
	}
	if c.QueryQueueWait < 0 {
		errs = append(errs, fmt.Errorf("QueryQueueWait %v: must not be negative", c.QueryQueueWait))
	}
	if c.QueryTimeout < 0 || c.WriteTimeout < 0 {
		errs = append(errs, errors.New("QueryTimeout and WriteTimeout must not be negative"))
	}
	if c.BodyTimeout < 0 || c.BodyMinRate < 1 {
		errs = append(errs, fmt.Errorf("BodyTimeout %v must not be negative and BodyMinRate %d must be positive", c.BodyTimeout, c.BodyMinRate))
	}
	if c.MaxInflightBodyBytes < c.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("MaxInflightBodyBytes %d: must be at least MaxBodyBytes (%d), or no body of the largest size could be read", c.MaxInflightBodyBytes, c.MaxBodyBytes))
	}
	if c.WorkBytesPerSecond < -1 || c.QueryMemoryBytes < 1 {
		errs = append(errs, fmt.Errorf("WorkBytesPerSecond %d (or -1: none) and QueryMemoryBytes %d must be positive", c.WorkBytesPerSecond, c.QueryMemoryBytes))
	}
	if c.MaxHeavyRequests < 1 {
		errs = append(errs, fmt.Errorf("MaxHeavyRequests %d: must be positive", c.MaxHeavyRequests))
	}
	if !(c.ClientShare > 0 && c.ClientShare <= 1) {
		errs = append(errs, fmt.Errorf("ClientShare %v: want a fraction in (0, 1]", c.ClientShare))
	}
	return errors.Join(errs...)
}

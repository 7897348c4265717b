package main

import (
	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/httpapi"
	"github.com/tsdht/tsdht/tsdb"
)

// Flags of `tsdht node` that bound what one request may cost the node (docs/http.md,
// "Limits and defaults").

var (
	nodeDefaults = tsdb.DefaultConfig()
	httpDefaults = httpapi.DefaultConfig()
)

// limitFlags are the node's flags of request limits.
func limitFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "new-series-per-request", Value: nodeDefaults.NewSeriesPerRequest,
			Usage: "series this node does not know yet that one write through it (RPC put, HTTP /write, remote write) may name; a write past it is refused whole (HTTP 413), nothing stored; 0 = no limit"},
		&cli.Float64Flag{Name: "new-series-per-second", Value: nodeDefaults.NewSeriesPerSecond,
			Usage: "series this node takes on per second, on average, that it did not know (a bucket --new-series-per-request deep); a write past it is refused whole (HTTP 429 with Retry-After); 0 = no limit"},
		&cli.DurationFlag{Name: "http-query-timeout", Value: httpDefaults.QueryTimeout,
			Usage: "with --http: how long one /query may run; a statement still running then fails with an error naming this flag"},
		&cli.IntFlag{Name: "http-max-queries", Value: httpDefaults.MaxConcurrentQueries,
			Usage: "with --http: /query requests executed at once; more wait up to 2s for a slot, then get 503 with Retry-After"},
		&cli.DurationFlag{Name: "http-body-timeout", Value: httpDefaults.BodyTimeout,
			Usage: "with --http: how long a write's body may take to arrive, plus 1s for every 16 KiB that arrived; a body still arriving then gets 408"},
		&cli.Float64Flag{Name: "http-budget", Value: float64(max(httpDefaults.WorkBytesPerSecond, 0)) / (1 << 20),
			Usage: "with --http: MiB a second of HTTP work (bytes received and decompressed, 128 per point a query reads) shared by all clients, one client at most half; past it writes get 429 and queries 503, with Retry-After; 0 = no budget (the default: set one where untrusted clients reach the HTTP port; it also throttles bulk loads and long queries)"},
		&cli.Float64Flag{Name: "http-query-memory", Value: float64(httpDefaults.QueryMemoryBytes) / (1 << 20),
			Usage: "with --http: MiB of points and windows all /query statements may hold at once; a statement past it fails with an error naming this flag"},
	}
}

// applyLimitFlags sets cfg's new-series budget from the flags.
func applyLimitFlags(c *cli.Context, cfg *tsdb.Config) error {
	n, r := c.Int("new-series-per-request"), c.Float64("new-series-per-second")
	if n < 0 {
		return badFlag("--new-series-per-request %d: want a count of series, or 0 for no limit", n)
	}
	if r < 0 {
		return badFlag("--new-series-per-second %v: want a rate, or 0 for no limit", r)
	}
	cfg.NewSeriesPerRequest, cfg.NewSeriesPerSecond = unlimitedIfZero(n), r
	if r == 0 {
		cfg.NewSeriesPerSecond = -1
	}
	return nil
}

// unlimitedIfZero maps a flag's 0 (no limit) to the Config's -1.
func unlimitedIfZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// httpLimits sets cfg's query limits from the flags.
func httpLimits(c *cli.Context, cfg *httpapi.Config) error {
	d, n := c.Duration("http-query-timeout"), c.Int("http-max-queries")
	if d <= 0 {
		return badFlag("--http-query-timeout %v: want a positive duration", d)
	}
	if n < 1 {
		return badFlag("--http-max-queries %d: want at least 1", n)
	}
	cfg.QueryTimeout, cfg.MaxConcurrentQueries = d, n
	bt, budget, qmem := c.Duration("http-body-timeout"), c.Float64("http-budget"), c.Float64("http-query-memory")
	if bt <= 0 {
		return badFlag("--http-body-timeout %v: want a positive duration", bt)
	}
	if !(budget == 0 || budget >= 1.0/(1<<20) && budget <= 1<<30) {
		return badFlag("--http-budget %v: want MiB a second (e.g. 16), or 0 for no budget", budget)
	}
	if !(qmem >= 1.0/(1<<20) && qmem <= 1<<30) {
		return badFlag("--http-query-memory %v: want MiB, more than 0 (e.g. 64)", qmem)
	}
	cfg.BodyTimeout, cfg.WorkBytesPerSecond, cfg.QueryMemoryBytes = bt, int64(budget*(1<<20)), int64(qmem*(1<<20))
	if budget == 0 {
		cfg.WorkBytesPerSecond = -1
	}
	return nil
}

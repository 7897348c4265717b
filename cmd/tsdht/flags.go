package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/clusterkey"
	"github.com/tsdht/tsdht/internal/cliflag"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
)

var clusterFlag = &cli.StringFlag{
	Name:     "cluster",
	Usage:    "RPC addresses of cluster nodes, HOST:PORT[,HOST:PORT…]; the first reachable one coordinates",
	Required: true,
}

var seriesFlag = &cli.StringFlag{
	Name:     "series",
	Usage:    "series key, 1–256 bytes of UTF-8",
	Required: true,
}

// timeoutFlag and splitAddrs are shared with tsdht-bench, which takes the same flags.
var (
	timeoutFlag = cliflag.Timeout
	splitAddrs  = cliflag.SplitAddrs
)

var clusterKeyFlag = &cli.StringFlag{
	Name:    "cluster-key-file",
	EnvVars: []string{"TSDHT_CLUSTER_KEY_FILE"},
	Usage:   "file of the cluster's keys, one per line (tsdht keygen writes one; the first is spoken, all are accepted); without it the cluster must have none",
}

// clusterKey reads --cluster-key-file; nil when it is not given.
func clusterKey(c *cli.Context) (clusterkey.Ring, error) {
	path := c.String(clusterKeyFlag.Name)
	if path == "" {
		return nil, nil
	}
	ring, err := clusterkey.Load(path)
	if err != nil {
		return nil, badFlag("--cluster-key-file: %w", err)
	}
	return ring, nil
}

// dialCluster returns a thin client of the --cluster nodes.
func dialCluster(c *cli.Context) (*client.Client, error) {
	addrs, err := hostPorts("cluster", c.String("cluster"))
	if err != nil {
		return nil, err
	}
	ring, err := clusterKey(c)
	if err != nil {
		return nil, err
	}
	// --linger is watch's alone: other commands have no such flag and leave it zero.
	return client.New(addrs, client.Config{Timeout: c.Duration("timeout"), RPC: rpc.Config{ClusterKey: ring}, WatchLinger: c.Duration("linger")})
}

// hostPorts splits the HOST:PORT[,HOST:PORT…] value of flag name, refusing an
// address without a port as a usage error.
func hostPorts(name, v string) ([]string, error) {
	addrs := splitAddrs(v)
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, badFlag("--%s %q: want HOST:PORT (%v)", name, a, err)
		}
	}
	return addrs, nil
}

func seriesKey(c *cli.Context) (string, error) {
	key := c.String("series")
	if err := series.ValidateKey(key); err != nil {
		return "", badFlag("--series: %w", err)
	}
	return key, nil
}

// parseTime accepts integer nanoseconds since the epoch, RFC 3339 with an optional
// fraction of a second, or a date YYYY-MM-DD (its midnight, UTC).
func parseTime(s string) (int64, error) {
	s = strings.TrimSpace(s)
	ns, err := strconv.ParseInt(s, 10, 64)
	if err == nil {
		return ns, nil
	}
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("timestamp %q is out of range (int64 nanoseconds since the epoch: years 1677–2262)", s)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		if t, err = time.Parse(time.DateOnly, s); err != nil {
			return 0, fmt.Errorf("timestamp %q is neither integer nanoseconds, RFC 3339 nor a date YYYY-MM-DD", s)
		}
	}
	if t.Year() < 1678 || t.Year() > 2261 {
		return 0, fmt.Errorf("timestamp %q is out of range (years 1678–2261 fit int64 nanoseconds)", s)
	}
	return t.UnixNano(), nil
}

// parseTimeFlag is parseTime for a flag: it also takes a time relative to now — "now",
// "now-5m", "now+1h", "-5m" (a signed Go duration, with "d" for days of 24 h too),
// "today" and "yesterday" (their midnight, UTC) — so that one command's flags all count
// from the same now. An integer is always nanoseconds since the epoch: "-5" is 5 ns
// before 1970, "-5s" five seconds ago. Every command that takes a time takes it here.
func parseTimeFlag(s string, now time.Time) (int64, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "today", "yesterday":
		y, m, d := now.UTC().Date()
		t := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		if s == "yesterday" {
			t = t.AddDate(0, 0, -1)
		}
		return t.UnixNano(), nil
	}
	rel, ok := strings.CutPrefix(s, "now")
	if !ok && !strings.HasPrefix(s, "-") && !strings.HasPrefix(s, "+") {
		return parseTime(s)
	}
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return parseTime(s) // a signed integer: absolute nanoseconds
	}
	if rel == "" {
		return now.UnixNano(), nil
	}
	d, err := parseOffset(rel)
	if err != nil {
		return 0, fmt.Errorf("timestamp %q: %v (relative times look like now, now-5m, -90s, now+1h, -7d)", s, err)
	}
	t := now.Add(d)
	if (d < 0) != t.Before(now) && d != 0 {
		return 0, fmt.Errorf("timestamp %q is out of range", s)
	}
	return t.UnixNano(), nil
}

// parseOffset parses a signed duration: Go's syntax (-5m, +1h30m) or whole days (-7d).
func parseOffset(s string) (time.Duration, error) {
	if s == "" || (s[0] != '-' && s[0] != '+') {
		return 0, fmt.Errorf("want a sign before the offset")
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n > 100_000 || n < -100_000 {
			return 0, fmt.Errorf("bad number of days %q", days)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

func quantumFlag() *cli.DurationFlag {
	return &cli.DurationFlag{Name: "quantum", Value: quanta.DefaultQuantum, Usage: "time quantum length, whole seconds ≥ 1s; the same on every node"}
}

func routingFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "routing", Value: "full", Usage: "routing mode, the same on every node: full (memberlist knows every member; placement in one local step) or kademlia (a node knows its k-bucket table; replica sets by iterative lookup; --join names seeds' gossip ports, which then serve bootstrap alone)"}
}

func idFormatFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "id-format", Value: "qfi", Usage: "shard ID layout: qfi (quanta first: spread a series), kfi (key first: keep it together) or hfi (hashed: spread every series and quantum; no ingest hot spot)"}
}

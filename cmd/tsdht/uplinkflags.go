package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/clusterkey"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
	"github.com/tsdht/tsdht/uplink"
)

// uplinkFlags are the node's uplink flags (docs/uplink.md), each a repeated (latest.go):
// an uplink URL may hold commas (tsdht://a:1,b:2). Each may be repeated: the
// n-th --uplink-prefix, --uplink-match or --uplink-every belongs to the n-th --uplink,
// and one given once applies to every uplink.
func uplinkFlags() []cli.Flag {
	return []cli.Flag{
		&cli.GenericFlag{Name: "uplink", Value: &repeated{}, Usage: "forward series to a central store: influx+http(s)://H:P/DB (InfluxDB 1.x line protocol), prom+http(s)://H:P/PATH (Prometheus remote write) or tsdht://H:P[,H:P…][?key=FILE] (another cluster; FILE its cluster key, else this node's); repeat for several (docs/uplink.md)"},
		&cli.GenericFlag{Name: "uplink-prefix", Value: &repeated{}, Usage: "forward only the series whose key begins with P (per --uplink, in order, or once for all)"},
		&cli.GenericFlag{Name: "uplink-match", Value: &repeated{}, Usage: "k=v[,k=v…]: forward only the series carrying these tags (per --uplink, in order, or once for all)"},
		&cli.GenericFlag{Name: "uplink-every", Value: &repeated{}, Usage: "send mean, min, max and count per window of this width (a duration of whole seconds, 1m) instead of the raw points; 0 = raw (per --uplink, in order, or once for all)"},
	}
}

// uplinkConfigs turns the uplink flags into the uplinks' configurations.
func uplinkConfigs(c *cli.Context) ([]uplink.Config, error) {
	get := func(name string) []string { return c.Generic(name).(*repeated).values }
	urls := get("uplink")
	if len(urls) > uplink.MaxUplinks {
		return nil, badFlag("--uplink given %d times: at most %d", len(urls), uplink.MaxUplinks)
	}
	pick := func(name string, i int) (string, error) {
		vs := get(name)
		switch {
		case len(vs) == 0:
			return "", nil
		case len(urls) == 0:
			return "", badFlag("--%s without --uplink", name)
		case len(vs) == 1:
			return vs[0], nil
		case len(vs) == len(urls):
			return vs[i], nil
		}
		return "", badFlag("--%s given %d times for %d --uplink: give it once (for all) or once per --uplink, in order", name, len(vs), len(urls))
	}
	var out []uplink.Config
	ids := map[string]bool{}
	for i, u := range urls {
		cfg := uplink.Config{URL: u}
		target, err := uplink.ParseURL(u)
		if err != nil {
			return nil, badFlag("--uplink: %w", err)
		}
		if target.KeyFile != "" {
			if cfg.ClusterKey, err = clusterkey.Load(target.KeyFile); err != nil {
				return nil, badFlag("--uplink %s: key=%s: %w (a key file as `tsdht keygen` writes)", target.Name, target.KeyFile, err)
			}
		}
		prefix, err := pick("uplink-prefix", i)
		if err != nil {
			return nil, err
		}
		match, err := pick("uplink-match", i)
		if err != nil {
			return nil, err
		}
		if prefix != "" && match != "" {
			return nil, badFlag("--uplink-prefix and --uplink-match for the same --uplink: give one")
		}
		cfg.Select.Prefix = prefix
		if match != "" {
			if cfg.Select.Match, err = catalog.ParseTags(match); err != nil {
				return nil, badFlag("--uplink-match: %w", err)
			}
		}
		every, err := pick("uplink-every", i)
		if err != nil {
			return nil, err
		}
		if every != "" {
			if cfg.Every, err = time.ParseDuration(every); err != nil {
				return nil, badFlag("--uplink-every %q: %v (want a duration: 0, 10s, 1m)", every, err)
			}
		}
		if err := cfg.Validate(); err != nil {
			return nil, badFlag("%w", err)
		}
		if ids[cfg.ID()] {
			return nil, badFlag("--uplink %s given twice with the same --uplink-every: one uplink per target and window", u)
		}
		ids[cfg.ID()] = true
		out = append(out, cfg)
	}
	if len(out) == 0 {
		for _, name := range []string{"uplink-prefix", "uplink-match", "uplink-every"} {
			if len(get(name)) > 0 {
				return nil, badFlag("--%s without --uplink", name)
			}
		}
	}
	return out, nil
}

// describeUplinks names the uplinks for the start-up log.
func describeUplinks(cfgs []uplink.Config) string {
	var b strings.Builder
	for i, c := range cfgs {
		if i > 0 {
			b.WriteString("; ")
		}
		t, _ := uplink.ParseURL(c.URL)
		fmt.Fprintf(&b, "%s every=%v prefix=%q match=%v", t.Name, c.Every, c.Select.Prefix, c.Select.Match)
	}
	return b.String()
}

// printUplinks prints, below status' table, one line per (node, uplink): which node
// forwards how many series of it, how far behind, and what it sent. Nothing when no
// node runs an uplink.
func printUplinks(out io.Writer, nodes []wire.NodeStats) error {
	any := false
	for _, n := range nodes {
		any = any || len(n.Uplinks) > 0
	}
	if !any {
		return nil
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "UPLINK\tEVERY\tNODE ID\tSERIES\tLAG\tLAG POINTS\tSENT POINTS\tSENT BYTES\tRETRIES\tREJECTED\tLATE\tNEVER SENT\tNOTE")
	for _, n := range nodes {
		for _, u := range n.Uplinks {
			every := "raw"
			if u.Every > 0 {
				every = time.Duration(u.Every).String()
			}
			note := u.LastError
			if len(u.Forwarding) > 0 && note == "" {
				note = "e.g. " + strings.Join(u.Forwarding[:min(3, len(u.Forwarding))], " ")
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%.1fs\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%s\n", u.URL, every, n.NodeID, u.Series,
				u.LagSeconds, u.LagPoints, u.SentPoints, store.FormatSize(u.SentBytes), u.Retries, u.Rejected, u.Late, u.NeverForwarded, note)
		}
	}
	return w.Flush()
}

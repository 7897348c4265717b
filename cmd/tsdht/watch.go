package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func watchCommand() *cli.Command {
	return &cli.Command{
		Name:  "watch",
		Usage: "print the points of series from a time on, then every new point as it is written: one \"key,timestamp,value\" line each",
		Description: "History from --from first, then live: every point with t ≥ --from once, in time order per\n" +
			"series. A point written later than a newer one of its series was printed is printed too (csv: a\n" +
			"note on stderr names it late; json: \"late\":true). When the node serving the subscription fails,\n" +
			"the watch moves to another node of the cluster and resumes from the last point printed (a note\n" +
			"on stderr says where). Stops on SIGINT/SIGTERM, or when no node will serve it (exit status 1).\n" +
			"See docs/watch.md.",
		Flags: append(selectionFlags("watch"),
			clusterFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "from", Value: "now", Usage: "print points from this time on: now, -30s, RFC 3339 or ns since the epoch"},
			&cli.StringFlag{Name: "format", Value: "csv", Usage: "output: csv (key,timestamp,value lines) or json (one object a line)"},
			&cli.DurationFlag{Name: "linger", Usage: "let the serving node gather the points written within this long of its previous answer into one answer: less work for it, up to this much later on screen (0: none; at most 1s)"},
		),
		Action: runWatch,
	}
}

func runWatch(c *cli.Context) error {
	many, err := selectsMany(c, "watch")
	if err != nil {
		return err
	}
	var sel client.Selector
	if many {
		if c.IsSet("match") && c.IsSet("prefix") {
			return badFlag("give --match or --prefix, not both")
		}
		sel.Prefix = c.String("prefix")
		if c.IsSet("match") {
			tags, err := matchTags(c)
			if err != nil {
				return err
			}
			for _, t := range tags {
				sel.Match = append(sel.Match, t.String())
			}
		}
	} else if sel.Series, err = seriesKey(c); err != nil {
		return err
	}
	from, err := parseTimeFlag(c.String("from"), time.Now())
	if err != nil {
		return badFlag("--from: %w", err)
	}
	if l := c.Duration("linger"); l < 0 || l > wire.MaxWatchLingerMillis*time.Millisecond {
		return badFlag("--linger %v: want 0 (none) to %v", l, wire.MaxWatchLingerMillis*time.Millisecond)
	}
	format, cl, err := dialFormatted(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	runs, sub := cl.Subscribe(ctx, sel, from)
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	print := watchCSV(w)
	if format == "json" {
		print = watchJSON(w)
	}
	moved := sub.Moved()
	for {
		select {
		case addr := <-moved:
			fmt.Fprintf(os.Stderr, "tsdht watch: served by %s\n", addr)
			continue
		case r, ok := <-runs:
			if !ok {
				if err := w.Flush(); err != nil {
					return err
				}
				if err := sub.Err(); err != nil && !errors.Is(err, context.Canceled) {
					return cli.Exit(fmt.Sprintf("tsdht watch: %v", err), 1)
				}
				return nil
			}
			if r.Late && format == "csv" {
				fmt.Fprintf(os.Stderr, "tsdht watch: late: %d points of %q older than one printed before (%d…%d)\n",
					r.Points.Len(), r.Key, r.Points.T[0], r.Points.T[r.Points.Len()-1])
			}
			if err := print(r); err != nil {
				return err
			}
		}
		if len(runs) == 0 { // flush when caught up, not every run
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// dialFormatted checks --format (csv or json) and then dials the cluster.
func dialFormatted(c *cli.Context) (string, *client.Client, error) {
	format := c.String("format")
	if format != "csv" && format != "json" {
		return "", nil, badFlag("--format %q: want csv or json", format)
	}
	cl, err := dialCluster(c)
	return format, cl, err
}

// watchCSV prints runs as key,timestamp,value lines.
func watchCSV(w *bufio.Writer) func(client.Run) error {
	return func(r client.Run) error { return writeMatchCSV(w, r.Key, &r.Points) }
}

// watchJSON prints runs as one {"key","t","v"[,"late"]} object a line.
func watchJSON(w *bufio.Writer) func(client.Run) error {
	enc := json.NewEncoder(w)
	type point struct {
		Key  string `json:"key"`
		T    int64  `json:"t"`
		V    any    `json:"v"`
		Late bool   `json:"late,omitempty"`
	}
	return func(r client.Run) error {
		p := &r.Points
		for i := range p.T {
			if err := enc.Encode(point{Key: r.Key, T: p.T[i], V: jsonValue(p, i), Late: r.Late}); err != nil {
				return err
			}
		}
		return nil
	}
}

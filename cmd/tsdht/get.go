package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func getCommand() *cli.Command {
	return &cli.Command{
		Name:  "get",
		Usage: "read the points of a series with from <= timestamp < to",
		Flags: []cli.Flag{
			clusterFlag, seriesFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "from", Required: true, Usage: "start of the range (inclusive): ns since the epoch, RFC 3339, or relative: now, now-5m, -1h"},
			&cli.StringFlag{Name: "to", Required: true, Usage: "end of the range (exclusive): ns since the epoch, RFC 3339, or relative: now, now-5m, -1h"},
			&cli.StringFlag{Name: "format", Value: "csv", Usage: "output: csv (timestamp,value lines) or json"},
			&cli.IntFlag{Name: "read-quorum", Usage: "replicas that must agree a shard is empty (default: the node's)"},
			&cli.BoolFlag{Name: "allow-partial", Usage: "print what could be read when some shard has no reachable replica (exit status 3)"},
		},
		Action: runGet,
	}
}

func runGet(c *cli.Context) error {
	key, err := seriesKey(c)
	if err != nil {
		return err
	}
	now := time.Now()
	from, err := parseTimeFlag(c.String("from"), now)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	to, err := parseTimeFlag(c.String("to"), now)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	if from > to {
		return fmt.Errorf("--from %d is after --to %d: ranges are [from, to)", from, to)
	}
	format := c.String("format")
	if format != "csv" && format != "json" {
		return fmt.Errorf("--format %q: want csv or json", format)
	}
	client, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer client.Close()
	res, err := client.Get(c.Context, key, from, to, wire.GetOptions{ReadQuorum: c.Int("read-quorum"), AllowPartial: c.Bool("allow-partial")})
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	if format == "json" {
		err = writeJSON(w, key, res)
	} else {
		err = writeCSV(w, &res.Points)
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return err
	}
	if res.Partial {
		return cli.Exit(fmt.Sprintf("tsdht: partial result: %d shards could not be read from any replica", res.Missing), 3)
	}
	return nil
}

func writeCSV(w *bufio.Writer, p *series.Points) error {
	cw := csv.NewWriter(w)
	for i := range p.T {
		if p.Type == series.String {
			if err := cw.Write([]string{strconv.FormatInt(p.T[i], 10), p.S[i]}); err != nil {
				return err
			}
			continue
		}
		w.WriteString(strconv.FormatInt(p.T[i], 10))
		w.WriteByte(',')
		w.WriteString(p.Value(i))
		w.WriteByte('\n')
	}
	cw.Flush()
	return cw.Error()
}

type jsonPoint struct {
	T int64 `json:"t"`
	V any   `json:"v"`
}

func writeJSON(w *bufio.Writer, key string, res wire.Result) error {
	p := &res.Points
	out := struct {
		Series  string      `json:"series"`
		Type    string      `json:"type"`
		Count   int         `json:"count"`
		Partial bool        `json:"partial"`
		Points  []jsonPoint `json:"points"`
	}{Series: key, Type: p.Type.String(), Count: p.Len(), Partial: res.Partial, Points: make([]jsonPoint, p.Len())}
	for i := range p.T {
		var v any
		switch p.Type {
		case series.Float:
			v = jsonFloat(p.F[i])
		case series.Int:
			v = p.I[i]
		case series.String:
			v = p.S[i]
		}
		out.Points[i] = jsonPoint{T: p.T[i], V: v}
	}
	enc := json.NewEncoder(w)
	return enc.Encode(out)
}

// jsonFloat prints NaN and ±Inf, which JSON numbers cannot hold, as strings.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308 {
		return json.Marshal(strconv.FormatFloat(v, 'g', -1, 64))
	}
	return []byte(strconv.FormatFloat(v, 'g', -1, 64)), nil
}

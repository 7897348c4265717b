package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The catalog's commands: series, meta, delete (docs/catalog.md).

func seriesCommand() *cli.Command {
	return &cli.Command{
		Name:  "series",
		Usage: "list series: one CSV line per series: key,type,tags",
		Description: "--match k=v[,k=v…] keeps the series carrying every tag; --prefix P the keys starting with P.\n" +
			"Without either, every series is listed. Tags print as one CSV field \"k=v,k=v\".",
		Flags: []cli.Flag{
			clusterFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringSliceFlag{Name: "match", Usage: "k=v[,k=v…]: only series carrying every tag"},
			&cli.StringFlag{Name: "prefix", Usage: "only series whose keys start with this"},
			&cli.StringFlag{Name: "format", Value: "csv", Usage: "output: csv (key,type,tags lines) or json (one object per line)"},
		},
		Action: runSeries,
	}
}

func matchTags(c *cli.Context) ([]catalog.Tag, error) {
	tags, err := catalog.ParseTags(c.StringSlice("match")...)
	if err != nil {
		return nil, badFlag("--match: %w", err)
	}
	return tags, nil
}

func runSeries(c *cli.Context) error {
	match, err := matchTags(c)
	if err != nil {
		return err
	}
	format, cl, err := dialFormatted(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	es, err := cl.Series(c.Context, match, c.String("prefix"))
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	cw := csv.NewWriter(w)
	for i := range es {
		if format == "json" {
			if err := json.NewEncoder(w).Encode(entryJSON(&es[i])); err != nil {
				return err
			}
			continue
		}
		if err := cw.Write([]string{es[i].Key, es[i].Type.String(), catalog.FormatTags(es[i].Tags)}); err != nil {
			return err
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	return w.Flush()
}

func metaCommand() *cli.Command {
	return &cli.Command{
		Name:  "meta",
		Usage: "set a series' unit, description, nominal rate and tags; prints its catalog entry as JSON",
		Description: "Only the flags given change. --tag k=v adds a tag or changes its value (repeat it, or\n" +
			"give k=v,k=v); --replace-tags makes the --tag list the series' whole tag set.",
		Flags: []cli.Flag{
			clusterFlag, seriesFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "unit", Usage: "unit of the values, e.g. Hz, V, rad"},
			&cli.StringFlag{Name: "description", Usage: "free text"},
			&cli.Float64Flag{Name: "rate", Usage: "nominal sampling rate in Hz (0 clears it)"},
			&cli.StringSliceFlag{Name: "tag", Usage: "k=v tag (repeatable)"},
			&cli.BoolFlag{Name: "replace-tags", Usage: "the --tag list replaces every tag of the series"},
		},
		Action: runMeta,
	}
}

func runMeta(c *cli.Context) error {
	key, err := seriesKey(c)
	if err != nil {
		return err
	}
	req := wire.MetaReq{Key: key,
		Unit: c.String("unit"), SetUnit: c.IsSet("unit"),
		Description: c.String("description"), SetDescription: c.IsSet("description"),
		NominalRate: c.Float64("rate"), SetRate: c.IsSet("rate"),
		Tags: c.StringSlice("tag"), SetTags: c.IsSet("tag") || c.Bool("replace-tags"), AddTags: !c.Bool("replace-tags"),
	}
	if req.SetTags {
		if _, err := catalog.ParseTags(req.Tags...); err != nil {
			return badFlag("--tag: %w", err)
		}
	}
	cl, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	e, err := cl.Meta(c.Context, req)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(entryJSON(&e))
}

func deleteCommand() *cli.Command {
	return &cli.Command{
		Name:  "delete",
		Usage: "delete a series' points with from <= timestamp < to, or without a range the whole series",
		Description: "Deleting the whole series also deletes its catalog entry and frees its key: it may be\n" +
			"written again with any type. Replicas that were down during the delete do not bring the\n" +
			"points back. A delete that fails part way is safe to repeat.",
		Flags: []cli.Flag{
			clusterFlag, seriesFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "from", Usage: "start of the range (inclusive)"},
			&cli.StringFlag{Name: "to", Usage: "end of the range (exclusive)"},
		},
		Action: runDelete,
	}
}

func runDelete(c *cli.Context) error {
	key, err := seriesKey(c)
	if err != nil {
		return err
	}
	if c.IsSet("from") != c.IsSet("to") {
		return usagef(c, "give both --from and --to to delete a range, or neither to delete the whole series")
	}
	cl, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	if !c.IsSet("from") {
		n, err := cl.DeleteSeries(c.Context, key)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "deleted series %q (%d shards)\n", key, n)
		return nil
	}
	from, err := parseTime(c.String("from"))
	if err != nil {
		return badFlag("--from: %w", err)
	}
	to, err := parseTime(c.String("to"))
	if err != nil {
		return badFlag("--to: %w", err)
	}
	if from >= to {
		return badFlag("--from %d is not before --to %d: ranges are [from, to)", from, to)
	}
	n, err := cl.Delete(c.Context, key, from, to)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "deleted [%d, %d) of series %q (%d shards)\n", from, to, key, n)
	return nil
}

// jsonEntry is a catalog entry as get --format json, meta and series --format json print it.
type jsonEntry struct {
	Key         string            `json:"key"`
	Type        string            `json:"type"`
	Unit        string            `json:"unit,omitempty"`
	Description string            `json:"description,omitempty"`
	NominalRate float64           `json:"nominal_rate,omitempty"`
	Tags        map[string]string `json:"tags"`
	First       *int64            `json:"first,omitempty"` // bounds of the timestamps written, rounded out to hours
	Last        *int64            `json:"last,omitempty"`
}

func entryJSON(e *catalog.Entry) jsonEntry {
	j := jsonEntry{Key: e.Key, Type: e.Type.String(), Unit: e.Unit, Description: e.Description,
		NominalRate: e.NominalRate, Tags: map[string]string{}}
	for _, t := range e.Tags {
		j.Tags[t.K] = t.V
	}
	if e.HasBounds {
		f, l := e.First, e.Last
		j.First, j.Last = &f, &l
	}
	return j
}

// writeMatchCSV prints several series as key,timestamp,value lines.
func writeMatchCSV(w *bufio.Writer, key string, p *series.Points) error {
	cw := csv.NewWriter(w)
	for i := range p.T {
		v := p.Value(i)
		if p.Type == series.String {
			v = p.S[i]
		}
		if err := cw.Write([]string{key, strconv.FormatInt(p.T[i], 10), v}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// selectionFlags are --series, --match and --prefix of a command that reads (verb)
// one series or every series the catalog selects.
func selectionFlags(verb string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "series", Usage: "series key, 1–256 bytes of UTF-8 (or --match / --prefix)"},
		&cli.StringSliceFlag{Name: "match", Usage: "k=v[,k=v…]: " + verb + " every series carrying these tags (csv gains a key column; json is an array)"},
		&cli.StringFlag{Name: "prefix", Usage: verb + " every series whose key starts with this (like --match)"},
	}
}

// selectsMany reports whether --match or --prefix selects the series instead of
// --series, refusing neither or both as a usage error.
func selectsMany(c *cli.Context, verb string) (bool, error) {
	multi := c.IsSet("match") || c.IsSet("prefix")
	if multi == c.IsSet("series") {
		return false, usagef(c, "give --series KEY, or --match k=v / --prefix P to %s several series", verb)
	}
	return multi, nil
}

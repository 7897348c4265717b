package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// putBatch is how many parsed points put sends at once: big enough to amortise a round
// trip, small enough that a bad line late in a stream finds most points acknowledged.
const putBatch = 10_000

func putCommand() *cli.Command {
	return &cli.Command{
		Name:  "put",
		Usage: `write points read from stdin, one "timestamp,value" per line`,
		Description: "Timestamps are integer nanoseconds since the epoch or RFC 3339. Values are floats unless\n" +
			"--type says otherwise. Strings need --type string: without it a value that is not a number is\n" +
			"refused, so a typo (6O.1) cannot make a new series a string series for good. Strings containing\n" +
			"commas or quotes are CSV-quoted. Blank lines and lines starting with # are skipped.\n" +
			"On a bad line, put stops, reports the line and how many points were stored, and exits 1.",
		Flags: []cli.Flag{
			clusterFlag, seriesFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "type", Usage: "value type: float, int or string (default: float; strings need --type string)"},
			&cli.IntFlag{Name: "write-quorum", Usage: "replicas that must store each shard (default: the node's)"},
		},
		Action: runPut,
	}
}

func runPut(c *cli.Context) error {
	key, err := seriesKey(c)
	if err != nil {
		return err
	}
	var typ series.Type
	if s := c.String("type"); s != "" {
		if typ, err = series.ParseType(s); err != nil {
			return fmt.Errorf("--type: %w", err)
		}
	}
	client, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer client.Close()

	stored, waited := 0, int64(0)
	var batch series.Points
	flush := func() error {
		if batch.Len() == 0 {
			return nil
		}
		r, err := client.PutReport(c.Context, key, batch, wire.PutOptions{WriteQuorum: c.Int("write-quorum")})
		stored += r.Stored
		waited += r.WaitedMillis
		batch = series.Points{}
		return err
	}
	fail := func(err error) error {
		return fmt.Errorf("%w (stored %d points of series %q before that)", err, stored, key)
	}

	r := csv.NewReader(os.Stdin)
	r.FieldsPerRecord = -1
	r.Comment = '#'
	r.ReuseRecord = true
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			if flushErr := flush(); flushErr != nil {
				return fail(flushErr)
			}
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			return fail(fmt.Errorf("stdin line %d: %v", line, err))
		}
		if len(rec) == 2 && line == 1 && strings.EqualFold(strings.TrimSpace(rec[0]), "timestamp") {
			continue // a header
		}
		if err := appendRecord(&batch, &typ, rec); err != nil {
			if flushErr := flush(); flushErr != nil {
				return fail(flushErr)
			}
			return fail(fmt.Errorf("stdin line %d: %v", line, err))
		}
		if batch.Len() >= putBatch {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	msg := fmt.Sprintf("stored %d points of series %q", stored, key)
	if waited > 0 {
		msg += fmt.Sprintf(" (after waiting %.1f s for the cluster to notice failed nodes)", float64(waited)/1000)
	}
	fmt.Fprintln(os.Stderr, msg)
	return nil
}

// appendRecord parses one "timestamp,value" record into the batch. Without --type the
// input is floats: a value that is not a number is refused with a message naming
// --type string, since the first write of a series fixes its type for good.
func appendRecord(b *series.Points, typ *series.Type, rec []string) error {
	if len(rec) != 2 {
		return fmt.Errorf("want 2 fields \"timestamp,value\", got %d", len(rec))
	}
	t, err := parseTime(rec[0])
	if err != nil {
		return err
	}
	v := rec[1]
	switch *typ {
	case series.Unknown:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("value %q is not a number: to write strings pass --type string "+
				"(a series' first write fixes its type for good, so put never guesses it)", v)
		}
		b.AppendFloat(t, f)
	case series.Float:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("value %q is not a float (this input is a float series)", v)
		}
		b.AppendFloat(t, f)
	case series.Int:
		i, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("value %q is not an int64 (this input is an int series)", v)
		}
		b.AppendInt(t, i)
	case series.String:
		if len(v) > series.MaxStringValueLen {
			return fmt.Errorf("string value of %d bytes; at most %d allowed", len(v), series.MaxStringValueLen)
		}
		b.AppendString(t, v)
	}
	return nil
}

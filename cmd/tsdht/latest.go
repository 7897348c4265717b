package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func latestCommand() *cli.Command {
	return &cli.Command{
		Name:  "latest",
		Usage: "print the latest point of series: one \"key,timestamp,value\" line per series",
		Description: "The coordinator reads the series' catalog entry (its time bounds and the newest point's time\n" +
			"reported by writers) from its registry replicas and checks, from the quanta's statistics, the few\n" +
			"quanta after it: the answer is exact whatever the report says. It walks back from there only\n" +
			"when the newest points were deleted. --lookback limits how far back from --at (default: no\n" +
			"limit). A series with no point in that span is named on stderr and the exit status is 1.",
		Flags: []cli.Flag{
			clusterFlag, timeoutFlag, clusterKeyFlag,
			&cli.GenericFlag{Name: "series", Required: true, Value: &repeated{}, Usage: "a series key; repeat the flag for more (--series 'db/m,host=a#v' --series KEY). A value with commas that names no series is taken as the older KEY,KEY… list"},
			&cli.StringFlag{Name: "at", Value: "now+10m", Usage: "look for points before this time (points up to 10 min in the future are accepted by default)"},
			&cli.StringFlag{Name: "lookback", Usage: "how far back from --at to look: 1h, 30d… (default: no limit)"},
		},
		Action: runLatest,
	}
}

func runLatest(c *cli.Context) error {
	values := c.Generic("series").(*repeated).values
	for _, k := range values {
		if err := series.ValidateKey(k); err != nil {
			return badFlag("--series: %w", err)
		}
	}
	before, err := parseTimeFlag(c.String("at"), time.Now())
	if err != nil {
		return badFlag("--at: %w", err)
	}
	since := int64(math.MinInt64)
	if lb := c.String("lookback"); lb != "" {
		back, err := parseWidth(lb)
		if err != nil {
			return badFlag("--lookback: %w", err)
		}
		if before > math.MinInt64+back {
			since = before - back
		}
	}
	client, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer client.Close()
	keys, err := latestKeys(c.Context, client, values)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	cw := csv.NewWriter(w)
	var failed []string
	for _, key := range keys {
		got, err := client.Latest(c.Context, []string{key}, since, before)
		if err != nil {
			fmt.Fprintf(os.Stderr, "tsdht latest: %v\n", withSuggestion(c.Context, client, key, err))
			failed = append(failed, key)
			continue
		}
		p, ok := got[key]
		if !ok {
			fmt.Fprintf(os.Stderr, "tsdht latest: series %q has no point before %d%s\n", key, before, lookbackNote(c.String("lookback")))
			failed = append(failed, key)
			continue
		}
		if err := cw.Write([]string{key, strconv.FormatInt(p.T[0], 10), p.Value(0)}); err != nil {
			return err
		}
	}
	cw.Flush()
	if err := errors.Join(cw.Error(), w.Flush()); err != nil {
		return err
	}
	if len(failed) > 0 {
		return cli.Exit(fmt.Sprintf("tsdht: no latest point for %d of %d series", len(failed), len(keys)), 1)
	}
	return nil
}

func completenessCommand() *cli.Command {
	return &cli.Command{
		Name:  "completeness",
		Usage: "compare stored with expected samples per quantum; list the quanta below the expected count",
		Description: "One line \"quantum_start,stored,expected\" per quantum holding fewer points than expected\n" +
			"(quantum_start in ns since the epoch), then \"total,stored,expected\". expected is --rate × the part\n" +
			"of the quantum inside [from, to), rounded; without --rate the rate is inferred from the data: the\n" +
			"median count of the whole quanta holding points, over the quantum length (printed on stderr).\n" +
			"Counts come from the replicas' per-quantum statistics: no point is read.",
		Flags: append(rangeFlags(),
			clusterFlag, seriesFlag, timeoutFlag, clusterKeyFlag, quantumFlag(),
			&cli.Float64Flag{Name: "rate", Usage: "nominal sample rate in Hz (default: inferred from the data)"},
		),
		Action: runCompleteness,
	}
}

func runCompleteness(c *cli.Context) error {
	key, err := seriesKey(c)
	if err != nil {
		return err
	}
	from, to, err := parseRange(c, time.Now())
	if err != nil {
		return err
	}
	q := c.Duration("quantum")
	if q < time.Second || q%time.Second != 0 {
		return badFlag("--quantum %v: want whole seconds, at least 1s (the cluster's quantum)", q)
	}
	rate := c.Float64("rate")
	if rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		return badFlag("--rate %v: want a positive rate in Hz", rate)
	}
	client, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer client.Close()
	qn := int64(q)
	counts := map[int64]int64{}
	err = client.AggWindows(c.Context, key, from, to, qn, wire.GetOptions{}, func(res wire.AggResult) error {
		for _, w := range res.Windows {
			counts[w.Start] += w.Count
		}
		return nil
	}, newProgress("completeness").update)
	if err != nil {
		return err
	}
	if rate == 0 {
		var full []int64
		for s, n := range counts {
			if s >= from && s+qn <= to {
				full = append(full, n)
			}
		}
		if len(full) == 0 {
			return fmt.Errorf("cannot infer the rate of %q: no whole quantum in the range holds points; give --rate", key)
		}
		sort.Slice(full, func(i, j int) bool { return full[i] < full[j] })
		rate = float64(full[len(full)/2]) / q.Seconds()
		fmt.Fprintf(os.Stderr, "tsdht completeness: rate inferred from the data: %g Hz\n", rate)
	}
	w := bufio.NewWriter(os.Stdout)
	var stored, expected int64
	if from < to {
		first := from - ((from%qn)+qn)%qn
		for s := first; s < to; s += qn {
			lo, hi := max(s, from), min(s+qn, to)
			exp := int64(math.Round(rate * float64(hi-lo) / 1e9))
			n := counts[s]
			stored += n
			expected += exp
			if n < exp {
				fmt.Fprintf(w, "%d,%d,%d\n", s, n, exp)
			}
			if s > math.MaxInt64-qn {
				break
			}
		}
	}
	fmt.Fprintf(w, "total,%d,%d\n", stored, expected)
	return w.Flush()
}

// repeated is a string flag that may be given several times, each value kept whole
// (urfave/cli's StringSliceFlag would split values at commas, which keys hold).
type repeated struct{ values []string }

func (r *repeated) Set(v string) error { r.values = append(r.values, v); return nil }
func (r *repeated) String() string     { return strings.Join(r.values, " ") }

// latestKeys returns the keys of latest's --series values. A value is one key — keys
// written by /write and remote write hold commas — except that a value with commas
// but no '=' (the mark of those keys) that names no series of the catalog is the
// older KEY,KEY… list.
func latestKeys(ctx context.Context, cl *client.Client, values []string) ([]string, error) {
	var keys []string
	for _, v := range values {
		if !strings.Contains(v, ",") || strings.Contains(v, "=") {
			keys = append(keys, v)
			continue
		}
		es, err := cl.Series(ctx, nil, v)
		if err != nil {
			return nil, err
		}
		whole := false
		for _, e := range es {
			whole = whole || e.Key == v
		}
		parts := strings.Split(v, ",")
		for _, p := range parts {
			whole = whole || series.ValidateKey(p) != nil
		}
		if whole { // a key of the catalog, or no list of keys
			keys = append(keys, v)
		} else {
			keys = append(keys, parts...)
		}
	}
	return keys, nil
}

// lookbackNote says, when --lookback limited the search, how to widen it.
func lookbackNote(lb string) string {
	if lb == "" {
		return ""
	}
	return " in the " + lb + " looked at (widen --lookback)"
}

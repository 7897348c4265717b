package main

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/tsdb/backup"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:      "backup",
		Usage:     "copy series, their points and catalog, into a directory as of a cut; a second run into it is incremental",
		ArgsUsage: " ",
		Description: "The cut is the time the run starts (printed first, and recorded in DIR/MANIFEST.json): every point\n" +
			"acknowledged before it, within the range, is in the backup; nothing at or after it is. Each quantum is\n" +
			"read at the cluster's read quorum and the run fails rather than leave a shard out. A run into a\n" +
			"directory holding a backup of the same selection reads and writes only the quanta whose statistics\n" +
			"changed (new quanta, the quantum the last cut fell in, late writes, deletes). --to names the\n" +
			"directory; a second --to (or --until) ends the range: `--to DIR --from -1h --to now`.\n" +
			"The format and its checks: docs/backup.md.",
		Flags: []cli.Flag{
			clusterFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringSliceFlag{Name: "to", Required: true, Usage: "DIR: the backup directory (created if missing); a second --to T ends the range"},
			&cli.StringSliceFlag{Name: "match", Usage: "k=v[,k=v…]: only series carrying every tag"},
			&cli.StringFlag{Name: "prefix", Usage: "only series whose keys start with this"},
			&cli.StringFlag{Name: "from", Usage: "start of the range, T (default: the beginning)"},
			&cli.StringFlag{Name: "until", Usage: "end of the range, T (default and latest: the cut); the same as a second --to"},
			&cli.Float64Flag{Name: "rate", Value: 50_000, Usage: "points read per second at most, over all series read at once (0: unpaced); keeps the cluster's writers undisturbed"},
			&cli.IntFlag{Name: "concurrency", Value: backup.DefaultConcurrency, Usage: "series read at once, 1–64"},
			&cli.IntFlag{Name: "read-quorum", Usage: "replicas that must agree a shard is empty (0: the cluster's read quorum)"},
			&cli.BoolFlag{Name: "full", Usage: "read every quantum again and compare its contents, not only its statistics: still writes only what differs, but reads the whole range"},
		},
		Action: runBackup,
	}
}

func runBackup(c *cli.Context) error {
	now := time.Now()
	o := backup.Options{Prefix: c.String("prefix"), Rate: c.Float64("rate"), Concurrency: c.Int("concurrency"),
		Read: wire.GetOptions{ReadQuorum: c.Int("read-quorum")}, Full: c.Bool("full"), Cut: now.UnixNano(), From: math.MinInt64, To: math.MaxInt64}
	match, err := matchTags(c)
	if err != nil {
		return err
	}
	o.Match = match
	if o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) {
		return badFlag("--rate %v: want points per second, ≥ 0 (0: unpaced)", o.Rate)
	}
	if o.Concurrency < 1 || o.Concurrency > 64 {
		return badFlag("--concurrency %d: want 1–64", o.Concurrency)
	}
	if q := o.Read.ReadQuorum; q < 0 || q > 7 {
		return badFlag("--read-quorum %d: want 0 (the cluster's) or 1–7", q)
	}
	tos := c.StringSlice("to")
	until := c.String("until")
	switch len(tos) {
	case 1:
		o.Dir = tos[0]
	case 2:
		_, err0 := parseTimeFlag(tos[0], now)
		_, err1 := parseTimeFlag(tos[1], now)
		switch {
		case err0 != nil && err1 == nil:
			o.Dir, until = tos[0], tos[1]
		case err0 == nil && err1 != nil:
			o.Dir, until = tos[1], tos[0]
		default:
			return badFlag("--to %q --to %q: one must name the directory and the other a time; or give the range's end as --until T", tos[0], tos[1])
		}
		if c.IsSet("until") {
			return badFlag("the range's end is given twice (a second --to and --until): give one")
		}
	default:
		return badFlag("--to given %d times: once for the directory, and at most once more for the range's end", len(tos))
	}
	if o.Dir == "" {
		return badFlag("--to: the backup directory is empty")
	}
	if s := c.String("from"); s != "" {
		if o.From, err = parseTimeFlag(s, now); err != nil {
			return badFlag("--from: %w", err)
		}
	}
	if until != "" {
		if o.To, err = parseTimeFlag(until, now); err != nil {
			return badFlag("--to/--until: %w", err)
		}
	}
	if o.From > o.To {
		return badFlag("--from %d is after the range's end %d", o.From, o.To)
	}
	cl, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Printf("cut %s (%d ns): points acknowledged before it are in the backup\n", now.UTC().Format(time.RFC3339Nano), o.Cut)
	r, err := backup.Backup(c.Context, cl, o)
	if err != nil {
		return err
	}
	fmt.Printf("run %d into %s: %d series; %d quanta written (%d points, %d bytes, %d files), %d unchanged, %d emptied; %.2f s, %.0f points/s read; the backup holds %d points\n",
		r.Number, o.Dir, r.Series, r.Written, r.Points, r.Bytes, len(r.Files), r.Kept, r.Dropped, r.Seconds, float64(r.Points)/math.Max(r.Seconds, 1e-9), r.PointsHeld)
	return nil
}

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "write a backup into a cluster, of any size and layout, catalog included; --verify only checks it",
		ArgsUsage: " ",
		Description: "Every file is checked against the manifest's size and SHA-256 first; a damaged file is named and\n" +
			"nothing is restored. Each series gets its recorded type and quantum, then its points (placed by this\n" +
			"cluster's IDs, rf and ID format) and its unit, description, tags and rate. Points already there are\n" +
			"overwritten with the same values: an interrupted restore can be run again.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: clusterFlag.Name, Usage: clusterFlag.Usage + " (not needed with --verify)"}, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "from", Required: true, Usage: "DIR: the backup directory"},
			&cli.BoolFlag{Name: "verify", Usage: "check the manifest and every file's checksum and restore nothing"},
			&cli.IntFlag{Name: "concurrency", Value: backup.DefaultConcurrency, Usage: "series written at once, 1–64"},
			&cli.IntFlag{Name: "write-quorum", Usage: "replicas each write must reach (0: the cluster's write quorum)"},
		},
		Action: runRestore,
	}
}

func runRestore(c *cli.Context) error {
	dir := c.String("from")
	o := backup.RestoreOptions{Concurrency: c.Int("concurrency"), WriteQuorum: c.Int("write-quorum")}
	if o.Concurrency < 1 || o.Concurrency > 64 {
		return badFlag("--concurrency %d: want 1–64", o.Concurrency)
	}
	if o.WriteQuorum < 0 || o.WriteQuorum > 7 {
		return badFlag("--write-quorum %d: want 0 (the cluster's) or 1–7", o.WriteQuorum)
	}
	if c.Bool("verify") {
		s, err := backup.Verify(dir)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		fmt.Printf("%s: intact: %d series, %d files (%d bytes), %d quanta, %d points, cut %s; %.2f s\n",
			dir, s.Series, s.Files, s.Bytes, s.Blocks, s.Points, time.Unix(0, s.Cut).UTC().Format(time.RFC3339Nano), s.Seconds)
		return nil
	}
	if c.String("cluster") == "" {
		return badFlag("--cluster H:P is needed to restore (--verify alone needs none)")
	}
	cl, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	s, err := backup.Restore(c.Context, cl, dir, o)
	for _, w := range s.Warnings {
		fmt.Fprintf(os.Stderr, "tsdht restore: %s\n", w)
	}
	if err != nil {
		return err
	}
	fmt.Printf("restored %s: %d series, %d points (cut %s); %.2f s, %.0f points/s\n",
		dir, s.Series, s.Points, time.Unix(0, s.Cut).UTC().Format(time.RFC3339Nano), s.Seconds, float64(s.Points)/math.Max(s.Seconds, 1e-9))
	return nil
}

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/tsdb/store"
)

func fsckCommand() *cli.Command {
	return &cli.Command{
		Name:  "fsck",
		Usage: "verify a stopped node's store offline",
		Description: "Reads everything in the store under --data without changing it: the write-ahead logs\n" +
			"as a replay would (valid records after a damaged one), every block of every table file\n" +
			"against its checksum, the LSM levels, every (shard, series) pair decoded and counted\n" +
			"against its summary, every series type. Exit status 0: no damage; 1: damage found (each\n" +
			"problem is printed); 2: the store could not be checked (in use by a running node, or not\n" +
			"a store). A damaged node is best emptied (move --data away) and restarted: repair refills\n" +
			"it from its replicas.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Required: true, Usage: "the node's data directory (its --data)"},
		},
		Action: func(c *cli.Context) error {
			dir := c.String("data")
			sdir := filepath.Join(dir, "store") // where tsdht node keeps it
			if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err == nil {
				sdir = dir // the store directory itself
			}
			r, err := store.Fsck(sdir, c.App.Writer)
			if err != nil {
				return cli.Exit(fmt.Sprintf("tsdht fsck: %v", err), 2)
			}
			for _, p := range r.Problems {
				fmt.Fprintf(c.App.Writer, "DAMAGED: %s\n", p)
			}
			if r.Damaged() {
				return cli.Exit(fmt.Sprintf("tsdht fsck: %s is damaged: %d problems", dir, len(r.Problems)), 1)
			}
			fmt.Fprintf(c.App.Writer, "%s: no damage found\n", dir)
			return nil
		},
	}
}

package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/store"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "list the members as a node sees them: 160-bit IDs, liveness, shard counts, repair progress",
		Description: "SHARDS counts (shard, series) pairs held. UNDER: pairs held with fewer than rf confirmed\n" +
			"copies at the node's last repair pass; HINTED: points kept for owners that could not be reached;\n" +
			"PUSHED: pairs sent to owners that lacked them; HANDED OFF: pairs deleted after their owners confirmed them;\n" +
			"DISK: the store's files (and --max-disk); RETENTION: --retention.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "cluster", Required: true, Usage: "RPC address of a node, HOST:PORT[,…]"},
			timeoutFlag,
		},
		Action: func(c *cli.Context) error {
			client, err := dialCluster(c)
			if err != nil {
				return err
			}
			defer client.Close()
			nodes, err := client.Status(c.Context)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "NODE ID\tRPC\tSTATE\tSHARDS\tSERIES\tPOINTS\tUNDER\tHINTED\tPUSHED\tHANDED OFF\tDISK\tRETENTION\tNOTE")
			for _, n := range nodes {
				r := n.Repair
				disk := store.FormatSize(n.DiskBytes)
				if n.MaxDisk > 0 {
					disk += "/" + store.FormatSize(n.MaxDisk)
				}
				ret := n.Retention
				if ret == "" || ret == "0s" {
					ret = "forever"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", n.NodeID, n.RPCAddr, n.State,
					n.Shards, n.Series, n.Points, r.UnderReplicated, r.HintedPoints, r.PushedPairs, r.DroppedPairs, disk, ret, n.Error)
			}
			return w.Flush()
		},
	}
}

func locateCommand() *cli.Command {
	return &cli.Command{
		Name:  "locate",
		Usage: "print the shard ID of a series at a time and, with --cluster, its replica set",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "cluster", Usage: "RPC address of a node, to list the replica set"},
			seriesFlag,
			&cli.StringFlag{Name: "at", Required: true, Usage: "timestamp: ns since the epoch or RFC 3339"},
			idFormatFlag(),
			quantumFlag(),
			timeoutFlag,
		},
		Action: func(c *cli.Context) error {
			key, err := seriesKey(c)
			if err != nil {
				return err
			}
			at, err := parseTime(c.String("at"))
			if err != nil {
				return fmt.Errorf("--at: %w", err)
			}
			f, err := quanta.ParseFormat(c.String("id-format"))
			if err != nil {
				return fmt.Errorf("--id-format: %w", err)
			}
			q, err := quanta.NewQuantum(c.Duration("quantum"))
			if err != nil {
				return fmt.Errorf("--quantum: %w", err)
			}
			id := quanta.ShardID(f, key, q.Start(at))
			fmt.Println(id)
			if c.String("cluster") == "" {
				return nil
			}
			client, err := dialCluster(c)
			if err != nil {
				return err
			}
			defer client.Close()
			replicas, err := client.Locate(c.Context, id)
			if err != nil {
				return err
			}
			for _, r := range replicas {
				fmt.Printf("%s %s\n", r.NodeID, r.RPCAddr)
			}
			return nil
		},
	}
}

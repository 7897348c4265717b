package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"
)

func decommissionCommand() *cli.Command {
	return &cli.Command{
		Name:  "decommission",
		Usage: "hand a node's shards off to their other owners, empty it, and remove it from the cluster",
		Description: "The node named (by the 160-bit ID that `tsdht status` prints) tells the others it is\n" +
			"leaving, pushes every (shard, series) pair it holds to the pair's owners without it, deletes\n" +
			"each once every owner confirmed it, and then leaves the cluster and exits. A plain SIGTERM\n" +
			"(systemctl stop, a rolling upgrade) keeps the data instead: the node comes back with it.\n" +
			"If an owner cannot be reached the hand-off stops with an error and the node stays a member:\n" +
			"repeat the command. Exit status 0 once the node is empty.",
		Flags: []cli.Flag{
			clusterFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "node", Required: true, Usage: "the node's 160-bit ID, 40 hex digits (tsdht status, NODE ID)"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Minute, Usage: "give up after this long (the hand-off moves all the node's data)"},
		},
		Action: func(c *cli.Context) error {
			cl, err := dialCluster(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			r, err := cl.Decommission(c.Context, c.String("node"))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "decommissioned %s: %d pairs pushed, %d handed off; it is leaving the cluster\n",
				r.NodeID, r.PushedPairs, r.HandedOff)
			return nil
		},
	}
}

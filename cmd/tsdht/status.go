package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// statusJSON is one line of `tsdht status --json`: what the table shows, with numbers as
// numbers, under names that stay put for scripts (the Ansible health check, monitoring).
type statusJSON struct {
	NodeID          string `json:"node_id"`
	RPC             string `json:"rpc"`
	State           string `json:"state"`     // alive, suspect, leaving, dead
	Reachable       bool   `json:"reachable"` // the member answered the status call
	Error           string `json:"error,omitempty"`
	Shards          int    `json:"shards"` // (shard, series) pairs held
	Series          int    `json:"series"`
	Points          int64  `json:"points"`
	UnderReplicated int64  `json:"under_replicated"`
	HintedPoints    int64  `json:"hinted_points"`
	PushedPairs     int64  `json:"pushed_pairs"`
	PushedPoints    int64  `json:"pushed_points"` // points in those pairs
	PushedBytes     int64  `json:"pushed_bytes"`  // their wire size (timestamps and values)
	HandedOffPairs  int64  `json:"handed_off_pairs"`
	RepairPasses    int64  `json:"repair_passes"`
	DiskBytes       int64  `json:"disk_bytes"`
	MaxDiskBytes    int64  `json:"max_disk_bytes"` // 0: no budget
	Retention       string `json:"retention"`      // a Go duration; "0s" keeps everything
	OldestQuantum   int64  `json:"oldest_quantum"` // UNIX s; 0 if empty
	IDFormat        string `json:"id_format,omitempty"`
	RF              int    `json:"rf,omitempty"`
	Corruptions     int64  `json:"corruptions"`       // reads that met damaged blocks since the node started
	WALBytesDropped int64  `json:"wal_bytes_dropped"` // WAL records lost after a damaged one at start-up
	RefetchedPairs  int64  `json:"refetched_pairs"`   // damaged pairs replaced by another owner's copy
	Refilling       bool   `json:"refilling"`         // lost writes at start-up; its peers' repair passes have not all ended
	// Flash wear since the node's store opened: bytes written to the device (WAL,
	// flushes, compactions) and the new points stored meanwhile.
	FlashBytesWritten int64 `json:"flash_bytes_written"`
	AppendedPoints    int64 `json:"appended_points"`
	// The node's uplinks (docs/uplink.md), when it runs any.
	Uplinks []wire.UplinkStats `json:"uplinks,omitempty"`
}

func newStatusJSON(n wire.NodeStats) statusJSON {
	return statusJSON{
		NodeID: n.NodeID, RPC: n.RPCAddr, State: string(n.State), Reachable: n.Reachable, Error: n.Error,
		Shards: n.Shards, Series: n.Series, Points: n.Points,
		UnderReplicated: n.Repair.UnderReplicated, HintedPoints: n.Repair.HintedPoints,
		PushedPairs: n.Repair.PushedPairs, PushedPoints: n.Repair.PushedPoints, PushedBytes: n.Repair.PushedBytes, HandedOffPairs: n.Repair.DroppedPairs, RepairPasses: n.Repair.Passes,
		DiskBytes: n.DiskBytes, MaxDiskBytes: n.MaxDisk, Retention: n.Retention, OldestQuantum: n.Oldest,
		IDFormat: n.Format, RF: n.RF,
		Corruptions: n.Corruptions, WALBytesDropped: n.WALBytesDropped, RefetchedPairs: n.Repair.Refetched,
		Refilling: n.Refilling, FlashBytesWritten: n.FlashBytesWritten, AppendedPoints: n.AppendedPoints, Uplinks: n.Uplinks,
	}
}

// flashWritten says what a node wrote to flash and what that cost per new point:
// "1.2 GiB (20.7 B/pt)"; "–" for a store in memory or one that wrote nothing yet.
func flashWritten(bytes, points int64) string {
	if bytes <= 0 {
		return "–"
	}
	if points <= 0 {
		return store.FormatSize(bytes)
	}
	return fmt.Sprintf("%s (%.1f B/pt)", store.FormatSize(bytes), float64(bytes)/float64(points))
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "list the members as a node sees them: 160-bit IDs, liveness, shard counts, repair progress",
		Description: "SHARDS counts (shard, series) pairs held. UNDER: pairs held with fewer than rf live\n" +
			"copies (at the node's last repair pass; while fewer than rf nodes are alive, every pair held,\n" +
			"and a line below the table says so); \"–\": a member that could not be asked (dead, unreachable); HINTED: points kept for owners that could not be reached;\n" +
			"PUSHED: pairs sent to owners that lacked them; HANDED OFF: pairs deleted after their owners confirmed them;\n" +
			"DISK: the store's files (and --max-disk); WRITTEN: bytes written to flash since the node started\n" +
			"(WAL, flushes, compactions) and per new point stored — what wears an eMMC out; RETENTION: --retention.\n" +
			"--json prints one object per member instead, for scripts: node_id, rpc, state, reachable, error,\n" +
			"shards, series, points, under_replicated, hinted_points, pushed_pairs, handed_off_pairs,\n" +
			"repair_passes, disk_bytes, max_disk_bytes, retention, oldest_quantum, id_format, rf, corruptions,\n" +
			"wal_bytes_dropped, refetched_pairs, flash_bytes_written, appended_points, uplinks. NOTE says why a member could not report, and any damage found.\n" +
			"A second table, when nodes run --uplink, lists per node and uplink the series it forwards, its lag, what it sent (docs/uplink.md).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "cluster", Required: true, Usage: "RPC address of a node, HOST:PORT[,…]"},
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per member on stdout instead of the table"},
			timeoutFlag, clusterKeyFlag,
		},
		Action: func(c *cli.Context) error {
			client, err := dialCluster(c)
			if err != nil {
				return err
			}
			defer client.Close()
			st, err := client.StatusOf(c.Context)
			if err != nil {
				return err
			}
			nodes := st.Nodes
			if st.Routing == "kademlia" {
				fmt.Fprintf(os.Stderr, "routing kademlia: the %d nodes this node knows (its routing table and itself), not the whole cluster\n", len(nodes))
			}
			if c.Bool("json") {
				under, _ := honestUnder(nodes)
				enc := json.NewEncoder(os.Stdout)
				for i, n := range nodes {
					sj := newStatusJSON(n)
					sj.UnderReplicated = under[i]
					if err := enc.Encode(sj); err != nil {
						return err
					}
				}
				return nil
			}
			under, clusterNote := honestUnder(nodes)
			w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "NODE ID\tRPC\tSTATE\tSHARDS\tSERIES\tPOINTS\tUNDER\tHINTED\tPUSHED\tHANDED OFF\tDISK\tWRITTEN\tRETENTION\tNOTE")
			for i, n := range nodes {
				if !n.Reachable {
					// A member that did not answer reports nothing: "–", not zeros.
					fmt.Fprintf(w, "%s\t%s\t%s\t–\t–\t–\t–\t–\t–\t–\t–\t–\t–\t%s\n", n.NodeID, n.RPCAddr, n.State, n.Error)
					continue
				}
				r := n.Repair
				disk := store.FormatSize(n.DiskBytes)
				if n.MaxDisk > 0 {
					disk += "/" + store.FormatSize(n.MaxDisk)
				}
				ret := n.Retention
				if ret == "" || ret == "0s" {
					ret = "forever"
				}
				note := n.Error
				if n.Corruptions > 0 || n.WALBytesDropped > 0 {
					note = strings.TrimSpace(fmt.Sprintf("%s damaged: %d reads, %s of WAL lost, %d pairs re-fetched (run tsdht fsck when stopped)",
						note, n.Corruptions, store.FormatSize(n.WALBytesDropped), r.Refetched))
				}
				if n.Refilling {
					note += "; REFILLING: incomplete until its peers' repair passes end"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", n.NodeID, n.RPCAddr, n.State,
					n.Shards, n.Series, n.Points, under[i], r.HintedPoints, r.PushedPairs, r.DroppedPairs, disk,
					flashWritten(n.FlashBytesWritten, n.AppendedPoints), ret, note)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if clusterNote != "" {
				fmt.Println(clusterNote)
			}
			return printUplinks(os.Stdout, nodes)
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
			&cli.StringFlag{Name: "at", Required: true, Usage: "timestamp: ns since the epoch, RFC 3339, a date (2026-11-27), or relative: now, now-5m, -1h, today, yesterday"},
			idFormatFlag(),
			quantumFlag(),
			&cli.BoolFlag{Name: "trace", Usage: "with --cluster: have the node find the replica set afresh and print, on stderr, how: in kademlia routing mode every request of its lookup (round, peer, XOR distance to the shard, peers answered)"},
			timeoutFlag, clusterKeyFlag,
		},
		Action: func(c *cli.Context) error {
			key, err := seriesKey(c)
			if err != nil {
				return err
			}
			if _, err := clusterKey(c); err != nil { // refused even when --cluster is not given
				return err
			}
			at, err := parseTimeFlag(c.String("at"), time.Now())
			if err != nil {
				return badFlag("--at: %w", err)
			}
			f, err := quanta.ParseFormat(c.String("id-format"))
			if err != nil {
				return badFlag("--id-format: %w", err)
			}
			q, err := quanta.NewQuantum(c.Duration("quantum"))
			if err != nil {
				return badFlag("--quantum: %w", err)
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
			if c.Bool("trace") {
				resp, err := client.LocateTrace(c.Context, id)
				if err != nil {
					return err
				}
				printTrace(os.Stderr, resp)
				for _, r := range resp.Replicas {
					fmt.Printf("%s %s\n", r.NodeID, r.RPCAddr)
				}
				return nil
			}
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

// honestUnder returns, per member, the pairs it holds with fewer than rf live copies, and a
// note when the cluster has fewer live members than rf. A node's repair pass counts pairs
// below min(rf, live members) (what it can act on); while fewer than rf members are alive
// every pair has fewer than rf copies, so the honest count is every pair held.
func honestUnder(nodes []wire.NodeStats) ([]int64, string) {
	rf, live := 0, 0
	for _, n := range nodes {
		if n.Alive() {
			live++
		}
		if n.Reachable && n.RF > rf {
			rf = n.RF
		}
	}
	out := make([]int64, len(nodes))
	for i, n := range nodes {
		out[i] = n.Repair.UnderReplicated
		if rf > 0 && live < rf {
			out[i] = int64(n.Shards)
		}
	}
	if rf > 0 && live < rf {
		return out, fmt.Sprintf("%s alive, fewer than rf %d: every shard has fewer than %d copies until more nodes join",
			plural(live, "member", "members"), rf, rf)
	}
	return out, ""
}

// printTrace prints how a node found a replica set: its lookup's requests, round by
// round, or that it needed none.
func printTrace(w io.Writer, resp *wire.LocateResp) {
	if len(resp.Hops) == 0 {
		fmt.Fprintf(w, "routing %s: the replica set was computed locally over the full member list, no hops\n", resp.Routing)
		return
	}
	rounds := 0
	for _, h := range resp.Hops {
		rounds = max(rounds, h.Round)
	}
	fmt.Fprintf(w, "routing %s: iterative lookup, %d requests in %d rounds\n", resp.Routing, len(resp.Hops), rounds)
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUND\tPEER\tRPC\tDISTANCE\tANSWER")
	for _, h := range resp.Hops {
		answer := fmt.Sprintf("%d peers", h.Returned)
		if h.Err != "" {
			answer = "failed: " + h.Err
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", h.Round, h.Peer.NodeID, h.Peer.RPCAddr, h.Distance, answer)
	}
	tw.Flush()
}

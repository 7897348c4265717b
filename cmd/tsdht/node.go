package main

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/store"
)

func nodeCommand() *cli.Command {
	return &cli.Command{
		Name:  "node",
		Usage: "run a node: serve RPC, gossip membership, store shards",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "rpc", Required: true, Usage: "HOST:PORT to serve RPC on (clients' --cluster names it)"},
			&cli.StringFlag{Name: "gossip", Required: true, Usage: "HOST:PORT for membership gossip (UDP and TCP)"},
			&cli.StringFlag{Name: "join", Usage: "gossip addresses of seed nodes, HOST:PORT[,HOST:PORT…]"},
			&cli.StringFlag{Name: "data", Required: true, Usage: "data directory: the node's identity and shards"},
			&cli.IntFlag{Name: "rf", Value: 3, Usage: "replication factor 1..7"},
			quantumFlag(),
			idFormatFlag(),
			&cli.IntFlag{Name: "write-quorum", Usage: "replicas that must store a shard before a write succeeds (default: majority of rf)"},
			&cli.IntFlag{Name: "read-quorum", Usage: "replicas that must agree a shard is empty (default: majority of rf)"},
			&cli.DurationFlag{Name: "max-future", Value: 10 * time.Minute, Usage: "refuse points stamped further than this ahead of the node's clock"},
			&cli.BoolFlag{Name: "quiet", Usage: "log only errors"},
		},
		Action: runNode,
	}
}

func runNode(c *cli.Context) error {
	cfg := tsdb.DefaultConfig()
	q, err := quanta.NewQuantum(c.Duration("quantum"))
	if err != nil {
		return fmt.Errorf("--quantum: %w", err)
	}
	f, err := quanta.ParseFormat(c.String("id-format"))
	if err != nil {
		return fmt.Errorf("--id-format: %w", err)
	}
	dir := c.String("data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	cfg.DHT.DataDir = dir
	cfg.DHT.GossipAddr = c.String("gossip")
	cfg.DHT.Join = splitAddrs(c.String("join"))
	cfg.DHT.Quantum = q
	cfg.DHT.Format = f
	cfg.RPCBind = c.String("rpc")
	cfg.DHT.RPCAddr = c.String("rpc")
	cfg.RF = c.Int("rf")
	cfg.WriteQuorum = c.Int("write-quorum")
	cfg.ReadQuorum = c.Int("read-quorum")
	cfg.MaxFuture = c.Duration("max-future")
	cfg.Logger = log.New(os.Stderr, "tsdht node: ", log.LstdFlags|log.Lmicroseconds)
	cfg.Store = store.NewMem()

	n, err := tsdb.Start(cfg)
	if err != nil {
		return err
	}
	self := n.DHT().Self()
	cfg.Logger.Printf("serving rpc %s gossip %s id %s (%s, quantum %v, rf %d)",
		n.RPCAddr(), cfg.DHT.GossipAddr, self.Key, f, q.Duration(), cfg.RF)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	s := <-sig
	cfg.Logger.Printf("%v: leaving the cluster", s)
	return n.Close()
}

package tsdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tsdht/tsdht/tsdb/store"
)

// LocalCluster is a cluster of nodes inside one process, on loopback with real TCP and
// real gossip: what the demo, the benchmarks and the tests run against.
type LocalCluster struct {
	Nodes []*Node
	dir   string
	owned bool
}

// StartLocal starts n nodes on 127.0.0.1 with ports picked by the kernel, the first
// being the others' seed, and waits until every node sees all n as live (for 30 s, or
// until ctx's deadline if that is later: an emulated ARM core needs minutes). tweak, if not
// nil, adjusts each node's configuration; by default nodes keep their shards in memory
// under a fresh temporary directory.
func StartLocal(ctx context.Context, n int, dir string, tweak func(i int, cfg *Config)) (*LocalCluster, error) {
	lc := &LocalCluster{dir: dir}
	if dir == "" {
		d, err := os.MkdirTemp("", "tsdht-local-")
		if err != nil {
			return nil, err
		}
		lc.dir, lc.owned = d, true
	}
	for i := 0; i < n; i++ {
		if _, err := lc.Add(tweak); err != nil {
			lc.Close()
			return nil, err
		}
	}
	within := 30 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) > within {
		within = time.Until(d)
	}
	if err := lc.WaitLive(ctx, n, within); err != nil {
		lc.Close()
		return nil, err
	}
	return lc, nil
}

// Add starts one more node, joining through the first, and returns its index.
func (lc *LocalCluster) Add(tweak func(i int, cfg *Config)) (int, error) {
	i := len(lc.Nodes)
	cfg := DefaultConfig()
	cfg.DHT.DataDir = filepath.Join(lc.dir, "node"+strconv.Itoa(i))
	cfg.DHT.GossipAddr = "127.0.0.1:0"
	cfg.RPCBind = "127.0.0.1:0"
	for _, seed := range lc.Nodes {
		if seed != nil {
			cfg.DHT.Join = []string{seed.DHT().GossipAddr()}
			break
		}
	}
	if tweak != nil {
		tweak(i, &cfg)
	}
	if err := os.MkdirAll(cfg.DHT.DataDir, 0o755); err != nil {
		return 0, err
	}
	if cfg.Store == nil {
		cfg.Store = store.NewMem()
	}
	node, err := Start(cfg)
	if err != nil {
		return 0, fmt.Errorf("node %d: %w", i, err)
	}
	lc.Nodes = append(lc.Nodes, node)
	return i, nil
}

// WaitLive waits until every running node sees want live members.
func (lc *LocalCluster) WaitLive(ctx context.Context, want int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for i, node := range lc.Nodes {
		if node == nil {
			continue
		}
		for len(node.DHT().Live()) != want {
			if time.Now().After(deadline) {
				return fmt.Errorf("node %d sees %d live members, want %d", i, len(node.DHT().Live()), want)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

// Kill stops node i as a crash would, without telling the others.
func (lc *LocalCluster) Kill(i int) error {
	err := lc.Nodes[i].Kill()
	lc.Nodes[i] = nil
	return err
}

// Close stops every node and removes the cluster's directory if StartLocal made it.
func (lc *LocalCluster) Close() error {
	var errs []error
	for _, n := range lc.Nodes {
		if n != nil {
			errs = append(errs, n.Close())
		}
	}
	lc.Nodes = nil
	if lc.owned {
		errs = append(errs, os.RemoveAll(lc.dir))
	}
	return errors.Join(errs...)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"

	"github.com/tsdht/tsdht/clusterkey"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// withSuggestion adds to err, when it says the cluster knows no series key, the
// catalog's nearest keys as a "did you mean".
func withSuggestion(ctx context.Context, cl *client.Client, key string, err error) error {
	var re *rpc.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeUnknownSeries {
		return err
	}
	if s := suggestSeries(ctx, cl, key); len(s) > 0 {
		return fmt.Errorf("%w; did you mean %s?", err, strings.Join(quoteAll(s), " or "))
	}
	return err
}

// suggestSeries returns up to three catalog keys within a few edits of key (a typo):
// it lists the series sharing key's first half, and the whole catalog when none does
// (a typo near the start).
func suggestSeries(ctx context.Context, cl *client.Client, key string) []string {
	es, err := cl.Series(ctx, nil, key[:len(key)/2])
	if err == nil && len(es) == 0 && len(key) > 1 {
		es, err = cl.Series(ctx, nil, "")
	}
	if err != nil {
		return nil
	}
	limit := max(2, len(key)/5)
	type cand struct {
		key string
		d   int
	}
	var cs []cand
	for _, e := range es {
		if d := smetrics.WagnerFischer(key, e.Key, 1, 1, 1); d <= limit && e.Key != key {
			cs = append(cs, cand{e.Key, d})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for i := 0; i < len(cs) && i < 3; i++ {
		out = append(out, cs[i].key)
	}
	return out
}

// suggestFor is withSuggestion for a command's error: when the cluster knew no
// --series, it asks the --cluster's catalog for the nearest keys.
func suggestFor(c *cli.Context, err error) error {
	var re *rpc.RemoteError
	key := c.String("series")
	if key == "" || !errors.As(err, &re) || re.Code != wire.CodeUnknownSeries || !c.IsSet("cluster") {
		return err
	}
	cl, derr := dialCluster(c)
	if derr != nil {
		return err
	}
	defer cl.Close()
	return withSuggestion(c.Context, cl, key, err)
}

// checkSeeds refuses --join seeds where a tsdht RPC port answers: --join wants the
// seeds' gossip addresses, and a node joining an RPC port would retry for ever. A seed
// that does not answer (not started yet, or a gossip port) is left to the join loop.
func checkSeeds(ctx context.Context, seeds []string, ring clusterkey.Ring) error {
	for _, s := range seeds {
		cl, err := client.New([]string{s}, client.Config{Timeout: 2 * time.Second, RPC: rpc.Config{ClusterKey: ring}})
		if err != nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = cl.Status(pctx)
		cancel()
		cl.Close()
		if err == nil {
			return badFlag("--join %s: a tsdht RPC port answers there (a node's --rpc); --join wants the seeds' --gossip addresses", s)
		}
	}
	return nil
}

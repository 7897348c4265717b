package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/clusterkey"
	"github.com/tsdht/tsdht/export"
	"github.com/tsdht/tsdht/httpapi"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/web"
)

// startHTTP serves the HTTP API (httpapi) of node on addr; the returned function
// stops it. An empty addr serves nothing.
// With a cluster key, every request but /ping, /health and /ready needs one of tokens.
// cfg holds the limits the node's flags set (limitflags.go).
func startHTTP(addr string, cfg httpapi.Config, node *tsdb.Node, ring clusterkey.Ring, logger *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	tokens := httpTokens(ring)
	eng := httpapi.NewNodeEngine(node)
	cfg.Tokens = tokens
	cfg.Profiling = os.Getenv("TSDHT_HTTP_PPROF") == "1"
	if cfg.Profiling {
		// The block and mutex profiles record nothing unless asked to: blocking of a
		// millisecond and more, one contended mutex event in 10.
		runtime.SetBlockProfileRate(int(time.Millisecond))
		runtime.SetMutexProfileFraction(10)
	}
	if len(tokens) == 0 {
		logger.Warn("the HTTP API is open to whoever reaches " + addr + ": start the node with --cluster-key-file to require its token")
	}
	h, err := httpapi.New(eng, cfg, logger)
	if err != nil {
		return nil, err
	}
	export.Mount(h, eng) // /api/v1/export, /api/v1/import
	// The page (package web) reads the cluster through this node, in process.
	page, err := web.Handler(nodePage{node}, web.Config{Catalog: nodePage{node}})
	if err != nil {
		return nil, err
	}
	h.Handle("/", page)
	// Prometheus' query API and remote read (prom.go; a build without PromQL answers
	// them 501), over the same coordinator; the page keeps /api/v1/series?prefix=.
	if err := mountPromQL(h.Handle, node, page, logger); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	srv := h.Server(addr)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server failed", "err", err)
		}
	}()
	logger.Info("serving http", "addr", ln.Addr().String())
	return func() {
		if err := httpapi.Shutdown(srv, 5*time.Second); err != nil {
			logger.Warn("http shutdown", "err", err)
		}
		eng.Close()
	}, nil
}

// httpTokenPurpose labels the HTTP token derived from a cluster key.
const httpTokenPurpose = "tsdht http token v1"

// httpTokens returns the HTTP tokens of every key of ring, the primary key's first.
func httpTokens(ring clusterkey.Ring) []string {
	var out []string
	for _, k := range ring {
		out = append(out, hex.EncodeToString(k.Derive(httpTokenPurpose, 16)))
	}
	return out
}

func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "print the HTTP API token of a cluster key (what InfluxDB and Prometheus clients send to a node's --http)",
		Description: "A node started with --cluster-key-file requires this token on its HTTP API (all but /ping,\n" +
			"/health and /ready), derived from the file's first key; the tokens of the file's other keys are\n" +
			"accepted too, so a key rotation rotates the tokens with it. Send it as `Authorization: Token T`,\n" +
			"`Authorization: Bearer T`, a basic-auth password (influx -password T) or ?p=T.",
		Flags: []cli.Flag{clusterKeyFlag},
		Action: func(c *cli.Context) error {
			ring, err := clusterKey(c)
			if err != nil {
				return err
			}
			if len(ring) == 0 {
				return fmt.Errorf("--cluster-key-file (or TSDHT_CLUSTER_KEY_FILE) is needed: the token is derived from the cluster key")
			}
			fmt.Fprintln(c.App.Writer, httpTokens(ring)[0])
			return nil
		},
	}
}

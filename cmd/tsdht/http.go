package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/tsdht/tsdht/httpapi"
	"github.com/tsdht/tsdht/tsdb"
)

// startHTTP serves the HTTP API (httpapi) of node on addr; the returned function
// stops it. An empty addr serves nothing.
func startHTTP(addr string, node *tsdb.Node, logger *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	eng := httpapi.NewNodeEngine(node)
	h, err := httpapi.New(eng, httpapi.DefaultConfig(), logger)
	if err != nil {
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

//go:build !nopromql

package main

import (
	"log/slog"
	"net/http"

	"github.com/tsdht/tsdht/promapi"
	"github.com/tsdht/tsdht/tsdb"
)

// mountPromQL mounts Prometheus' query API and remote read (package promapi, the
// upstream PromQL engine) over node's coordinator; /api/v1/series without match[] stays
// page's.
func mountPromQL(mount func(string, http.Handler), node *tsdb.Node, page http.Handler, logger *slog.Logger) error {
	prom, err := promapi.New(node.Coordinator(), promapi.Config{}, logger)
	if err != nil {
		return err
	}
	prom.Mount(mount, page)
	return nil
}

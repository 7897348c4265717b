//go:build nopromql

package main

import (
	"log/slog"
	"net/http"

	"github.com/tsdht/tsdht/tsdb"
)

// mountPromQL answers Prometheus' query API and remote read with 501, saying how to get
// a build that serves them; /api/v1/series without match[] stays page's.
func mountPromQL(mount func(string, http.Handler), _ *tsdb.Node, page http.Handler, _ *slog.Logger) error {
	off := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotImplemented)
		w.Write([]byte(`{"status":"error","errorType":"unavailable","error":"this tsdht was built without PromQL (-tags nopromql, as make arm builds for boards): build it with make arm PROMQL=1, or go build ./cmd/tsdht"}` + "\n"))
	})
	for _, p := range []string{"/api/v1/query", "/api/v1/query_range", "/api/v1/labels", "/api/v1/label/", "/api/v1/status/buildinfo", "/api/v1/metadata", "/api/v1/read"} {
		mount(p, off)
	}
	mount("/api/v1/series", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if page != nil && r.Method == http.MethodGet && !r.URL.Query().Has("match[]") {
			page.ServeHTTP(w, r)
			return
		}
		off.ServeHTTP(w, r)
	}))
	return nil
}

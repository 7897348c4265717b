package httpapi

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// Authentication.
//
// With Config.Tokens set (a node with a cluster key derives them from it: `tsdht token`
// prints the one to use), every path but /ping, /health and /ready — which say nothing
// but that the process serves — needs one of the tokens, in whichever form the client
// at hand can send it:
//
//	Authorization: Token T      InfluxDB clients (the influx CLI's -token, node-influx's options)
//	Authorization: Bearer T     Prometheus remote_write (authorization: credentials), curl
//	basic auth, any user, password T   the influx CLI's -password, InfluxDB 1.x libraries
//	?p=T                        InfluxDB 1.x URL authentication
//
// Without tokens the API is open to whoever reaches the port: the node warns at start.

// authorized reports whether r carries one of the tokens (always, without tokens).
func (h *Handler) authorized(r *http.Request) bool {
	if len(h.cfg.Tokens) == 0 {
		return true
	}
	var given []string
	if a := r.Header.Get("Authorization"); a != "" {
		scheme, rest, _ := strings.Cut(a, " ")
		switch strings.ToLower(scheme) {
		case "token", "bearer":
			given = append(given, strings.TrimSpace(rest))
		}
	}
	if _, p, ok := r.BasicAuth(); ok {
		given = append(given, p)
	}
	if p := r.URL.Query().Get("p"); p != "" {
		given = append(given, p)
	}
	for _, g := range given {
		for _, t := range h.cfg.Tokens {
			if subtle.ConstantTimeCompare([]byte(g), []byte(t)) == 1 {
				return true
			}
		}
	}
	return false
}

// openPaths need no token.
var openPaths = map[string]bool{"/ping": true, "/health": true, "/ready": true}

func (h *Handler) refuse(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Basic realm="tsdht"`)
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "authorization failed: this node has a cluster key, so the HTTP API needs its token " +
		"(`tsdht token --cluster-key-file F` prints it): send it as `Authorization: Token <token>`, `Authorization: Bearer <token>`, " +
		"a basic-auth password, or the p= parameter"})
}

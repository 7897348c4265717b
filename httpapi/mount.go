package httpapi

import "net/http"

// Handle serves handler at pattern (a net/http ServeMux pattern) behind the API's
// authentication and request metrics: how cmd/tsdht mounts the node's page (package
// web) at "/", which then answers every path the API does not.
func (h *Handler) Handle(pattern string, handler http.Handler) {
	h.route(pattern, handler.ServeHTTP)
}

// mountStream serves /api/v1/stream when the engine serves subscriptions (stream.go).
func (h *Handler) mountStream() {
	if sub, ok := h.eng.(Subscriber); ok {
		h.route("/api/v1/stream", h.serveStream(sub))
	}
}

package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Limits a /query is held to before it costs the node: its size (MaxQueryBytes, for a
// POSTed body and a q in the URL alike), the nesting of its parentheses (MaxQueryDepth,
// counted before influxql's parser, which recurses once per level, sees it), the queries
// executed at once (MaxConcurrentQueries, waiting QueryQueueWait for a slot), and its
// time (QueryTimeout: a statement still running then fails naming it).

// checkQuery answers a query that is too long or too deeply nested and reports whether
// it may be parsed.
func (h *Handler) checkQuery(w http.ResponseWriter, q string) bool {
	if int64(len(q)) > h.cfg.MaxQueryBytes {
		h.m.refused.WithLabelValues("query_size").Inc()
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("query of %d bytes, at most %d accepted (MaxQueryBytes)", len(q), h.cfg.MaxQueryBytes))
		return false
	}
	if d := nestingDepth(q, h.cfg.MaxQueryDepth); d > h.cfg.MaxQueryDepth {
		h.m.refused.WithLabelValues("query_depth").Inc()
		httpError(w, http.StatusBadRequest, fmt.Sprintf("error parsing query: parentheses nested more than %d deep (MaxQueryDepth): simplify the expression", h.cfg.MaxQueryDepth))
		return false
	}
	return true
}

// nestingDepth returns the deepest nesting of parentheses in an InfluxQL query, not
// counting those inside quoted strings or identifiers ('…', "…", with backslash
// escapes), or limit+1 as soon as it passes limit. Parentheses of a regular expression
// count: a limit of a hundred levels leaves them room.
func nestingDepth(q string, limit int) int {
	depth, deepest := 0, 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > limit {
					return deepest
				}
			}
		case c == ')':
			depth = max(depth-1, 0)
		}
	}
	return deepest
}

// heldTooMuch returns the result of a statement that is not run because the answers of
// the query's statements before it hold held values, more than MaxQueryPoints: a query
// of many statements, each within the limit, must not hold many times it until its
// answer is written. nil: run it.
func (h *Handler) heldTooMuch(held int) *result {
	if held <= h.cfg.MaxQueryPoints {
		return nil
	}
	return &result{Err: fmt.Sprintf("not run: the answers of the query's earlier statements hold more than %d values (MaxQueryPoints): send the statements in queries of their own", h.cfg.MaxQueryPoints)}
}

// resultValues counts the values a statement's answer holds: each row's values but its
// time.
func resultValues(res *result) int {
	n := 0
	for _, s := range res.Series {
		n += s.len() * max(1, len(s.Columns)-1)
	}
	return n
}

// acquireQuery takes a query slot, waiting up to QueryQueueWait; when none frees, the
// query is answered 503 with Retry-After and acquireQuery returns false.
func (h *Handler) acquireQuery(w http.ResponseWriter, r *http.Request) bool {
	if waitSlot(r.Context(), h.qslots, h.cfg.QueryQueueWait) {
		return true
	}
	h.m.refused.WithLabelValues("query_busy").Inc()
	w.Header().Set("Retry-After", "1")
	httpError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many queries in progress on this node (%d, MaxConcurrentQueries): retry after 1 s, or ask another node", h.cfg.MaxConcurrentQueries))
	return false
}

func (h *Handler) releaseQuery() { <-h.qslots }

// timedOut rewrites the error of a statement that ran out of the query's time so that
// it names the limit.
func (h *Handler) timedOut(ctx context.Context, err string) string {
	if err == "" || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	h.m.refused.WithLabelValues("query_timeout").Inc()
	return fmt.Sprintf("query timeout: the query ran past %v (QueryTimeout, tsdht node --http-query-timeout): narrow its time range or series (%s)", h.cfg.QueryTimeout, err)
}

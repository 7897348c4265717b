package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Subscriber is an Engine that serves live subscriptions: /api/v1/stream, the
// server-sent events of a `tsdht watch` (docs/watch.md).
type Subscriber interface {
	Subscribe(ctx context.Context, sel client.Selector, from int64) (<-chan client.Run, *client.Subscription)
}

// streamEvent is one run of a stream: the data of one server-sent event.
type streamEvent struct {
	Key  string  `json:"key"`
	T    []int64 `json:"t"`
	V    []any   `json:"v"`
	Late bool    `json:"late,omitempty"`
}

// serveStream answers GET /api/v1/stream?series=K|prefix=P|match=k=v[&match=…][&from=T]
// with server-sent events: one "data:" line of JSON per run of points (streamEvent),
// history from T then live, each point once, in time order per series. from is ns
// since the epoch, RFC 3339, or a negative offset from now ("-30s"); default now.
func (h *Handler) serveStream(sub Subscriber) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			methodNotAllowed(w, http.MethodGet)
			return
		}
		q := r.URL.Query()
		sel := client.Selector{Series: q.Get("series"), Prefix: q.Get("prefix"), Match: q["match"]}
		n := 0
		for _, set := range []bool{sel.Series != "", sel.Prefix != "", len(sel.Match) > 0} {
			if set {
				n++
			}
		}
		if n != 1 {
			httpError(w, http.StatusBadRequest, "give exactly one of series=KEY, prefix=P or match=k=v")
			return
		}
		from, err := streamFrom(q.Get("from"), time.Now())
		if err != nil {
			httpError(w, http.StatusBadRequest, err.Error())
			return
		}
		flusher, ok := w.(http.Flusher)
		if !ok {
			httpError(w, http.StatusInternalServerError, "this server cannot stream")
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		runs, s := sub.Subscribe(ctx, sel, from)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, ": tsdht watch\n\n")
		flusher.Flush()
		enc := json.NewEncoder(w)
		for run := range runs {
			ev := streamEvent{Key: run.Key, T: run.Points.T, V: make([]any, run.Points.Len()), Late: run.Late}
			for i := range ev.V {
				ev.V[i] = streamValue(&run.Points, i)
			}
			fmt.Fprint(w, "data: ")
			if err := enc.Encode(ev); err != nil { // Encode ends the line
				return
			}
			fmt.Fprint(w, "\n")
			if len(runs) == 0 {
				flusher.Flush()
			}
		}
		if err := s.Err(); err != nil && ctx.Err() == nil {
			fmt.Fprintf(w, "event: error\ndata: %s\n\n", strings.ReplaceAll(err.Error(), "\n", " "))
			flusher.Flush()
		}
	}
}

// streamValue is a point's value as JSON carries it: a float that JSON cannot hold
// (NaN, ±Inf) as a string.
func streamValue(p *series.Points, i int) any {
	switch p.Type {
	case series.Float:
		if f := p.F[i]; math.IsNaN(f) || math.IsInf(f, 0) {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return p.F[i]
	case series.Int:
		return p.I[i]
	default:
		return p.S[i]
	}
}

// streamFrom parses a stream's from: ns since the epoch, RFC 3339, or a negative
// offset from now ("-30s"); empty is now.
func streamFrom(s string, now time.Time) (int64, error) {
	if s == "" || s == "now" {
		return now.UnixNano(), nil
	}
	if ns, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ns, nil
	}
	if strings.HasPrefix(s, "-") {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("from=%q: want ns since the epoch, RFC 3339 or an offset like -30s", s)
		}
		return now.Add(d).UnixNano(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("from=%q: want ns since the epoch, RFC 3339 or an offset like -30s", s)
	}
	return t.UnixNano(), nil
}

// Subscribe implements Subscriber through the node (tsdb.Node.Subscribe).
func (e *NodeEngine) Subscribe(ctx context.Context, sel client.Selector, from int64) (<-chan client.Run, *client.Subscription) {
	return e.node.Subscribe(ctx, sel, from)
}

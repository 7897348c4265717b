package uplink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// aggFns are what a windowed uplink sends of each window, in this order.
var aggFns = []agg.Fn{agg.Mean, agg.Min, agg.Max, agg.Count}

// sink encodes one batch for a target and sends it. A sink holds one batch at a time.
type sink interface {
	// points adds the raw points of a series.
	points(e *catalog.Entry, pts *series.Points)
	// windows adds the windows of a series (mean, min, max, count of each).
	windows(e *catalog.Entry, ws []agg.Window)
	// size is the batch's size before compression.
	size() int
	// send sends the batch and returns the bytes put on the wire; a *rejectedError
	// says the target refused it for good (retrying cannot help).
	send(ctx context.Context) (int, error)
	// reset empties the batch.
	reset()
	close() error
}

// rejectedError is a target's refusal of a batch that a retry would not change (an
// HTTP 4xx other than 404, 408 and 429: a missing database is an operator's to create,
// and the points wait for it).
type rejectedError struct{ msg string }

func (e *rejectedError) Error() string { return e.msg }

func newSink(t Target, cfg Config) (sink, error) {
	switch t.Kind {
	case "influx":
		return &httpSink{target: t, enc: &lineEncoder{}, gzip: true, contentType: "text/plain; charset=utf-8", client: &http.Client{}}, nil
	case "prom":
		return &httpSink{target: t, enc: &promEncoder{}, contentType: "application/x-protobuf", client: &http.Client{},
			headers: map[string]string{"X-Prometheus-Remote-Write-Version": "0.1.0"}}, nil
	case "tsdht":
		return newTsdhtSink(t, cfg)
	}
	return nil, fmt.Errorf("uplink %s: unknown target kind %q", t.Name, t.Kind)
}

// encoder builds an HTTP request body.
type encoder interface {
	points(e *catalog.Entry, pts *series.Points)
	windows(e *catalog.Entry, ws []agg.Window)
	size() int
	body() []byte // the body to send, compressed as the protocol wants (prom: snappy)
	reset()
}

// httpSink sends an encoder's batches by POST.
type httpSink struct {
	target      Target
	enc         encoder
	gzip        bool
	contentType string
	headers     map[string]string
	client      *http.Client
	zbuf        bytes.Buffer
	zw          *gzip.Writer
}

func (s *httpSink) points(e *catalog.Entry, pts *series.Points) { s.enc.points(e, pts) }
func (s *httpSink) windows(e *catalog.Entry, ws []agg.Window)   { s.enc.windows(e, ws) }
func (s *httpSink) size() int                                   { return s.enc.size() }
func (s *httpSink) reset()                                      { s.enc.reset() }
func (s *httpSink) close() error                                { s.client.CloseIdleConnections(); return nil }

func (s *httpSink) send(ctx context.Context) (int, error) {
	body := s.enc.body()
	if s.gzip {
		s.zbuf.Reset()
		if s.zw == nil {
			// The fastest level: a WAN link's bytes matter less than a board's single
			// core, and line protocol compresses well at any level.
			s.zw, _ = gzip.NewWriterLevel(&s.zbuf, gzip.BestSpeed)
		} else {
			s.zw.Reset(&s.zbuf)
		}
		s.zw.Write(body)
		if err := s.zw.Close(); err != nil {
			return 0, err
		}
		body = s.zbuf.Bytes()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.target.Endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", s.contentType)
	if s.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	} else if s.target.Kind == "prom" {
		req.Header.Set("Content-Encoding", "snappy")
	}
	for k, v := range s.headers {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return len(body), nil
	}
	text := fmt.Sprintf("%s answered %s: %s", s.target.Name, resp.Status, strings.TrimSpace(string(msg)))
	if resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests &&
		resp.StatusCode != http.StatusNotFound {
		return len(body), &rejectedError{text}
	}
	return len(body), fmt.Errorf("%s", text)
}

package httpapi

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// errTooLarge is wrapped by readBody's error for a body over the limit.
var errTooLarge = errors.New("request body too large")

// readBody reads a request body of at most max bytes — before and, with
// Content-Encoding gzip, after decompression — refusing a larger one as soon as
// its size shows, without allocating for it. It reads into buf (reset first) when
// buf is not nil. The body is read under m's deadline and its bytes, arrived and
// decompressed, charged to m (bodymeter.go).
func readBody(w http.ResponseWriter, r *http.Request, max int64, buf *bytes.Buffer, m *meter) ([]byte, error) {
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	buf.Reset()
	if r.ContentLength > max && !isGzip(r) {
		return nil, fmt.Errorf("%w: %d bytes, at most %d accepted: split the batch", errTooLarge, r.ContentLength, max)
	}
	var src io.Reader = io.LimitReader(m.body(w, r), max+1)
	if isGzip(r) {
		zr, err := gzip.NewReader(src)
		if err != nil {
			if errors.Is(err, errBodySlow) || errors.Is(err, errBodyMemory) {
				return nil, err
			}
			return nil, fmt.Errorf("Content-Encoding gzip, but the body is not gzip: %v", err)
		}
		defer zr.Close()
		src = io.LimitReader(m.decoded(zr), max+1)
	}
	if r.ContentLength > 0 && r.ContentLength <= max {
		buf.Grow(int(r.ContentLength))
	}
	n, err := buf.ReadFrom(src)
	if n > max {
		return nil, fmt.Errorf("%w: more than %d bytes (after decompression): split the batch", errTooLarge, max)
	}
	if errors.Is(err, errBodySlow) || errors.Is(err, errBodyMemory) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("reading the body: %v", err)
	}
	return buf.Bytes(), nil
}

// bodies keeps the buffers of line-protocol bodies for the next requests: a body
// is parsed into points, keys and strings of their own, so its buffer is free
// once the request was parsed.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody bounds the buffers bodies keeps: a rare large body's buffer is left
// to the collector.
const maxPooledBody = 4 << 20

func putBody(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBody {
		bodies.Put(b)
	}
}

func isGzip(r *http.Request) bool {
	return strings.EqualFold(strings.TrimSpace(r.Header.Get("Content-Encoding")), "gzip")
}

// bodyError answers a readBody error: 413 for a body too large, 408 for one too slow
// (the connection is closed after), 429 with Retry-After when the node has no room for
// it, else 400.
func bodyError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errTooLarge):
		httpError(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	case errors.Is(err, errBodySlow):
		w.Header().Set("Connection", "close")
		httpError(w, http.StatusRequestTimeout, err.Error())
		return
	case errors.Is(err, errBodyMemory):
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusTooManyRequests, err.Error())
		return
	}
	httpError(w, http.StatusBadRequest, err.Error())
}

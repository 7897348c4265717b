// Package hostile builds the request bodies of issue #31's adversarial pass, for the
// tests that hold a node's doors against them: a line-protocol body naming a new series
// per line, a Prometheus remote write declaring millions of empty samples, and an
// InfluxQL query nested deeper than any parser should recurse.
package hostile

import (
	"strconv"
	"strings"

	"github.com/klauspost/compress/snappy"
	"google.golang.org/protobuf/encoding/protowire"
)

// NewSeriesLines returns n lines of line protocol, each naming a series of its own
// (`m,s=<i> v=1`), without timestamps: the body of "one write of a million new series".
func NewSeriesLines(m string, n int) []byte {
	b := make([]byte, 0, n*(len(m)+16))
	for i := range n {
		b = append(b, m...)
		b = append(b, ",s="...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, " v=1\n"...)
	}
	return b
}

// RemoteWriteBomb returns a snappy-compressed Prometheus WriteRequest of one series
// (`bomb`) declaring samples empty samples: two bytes each once decompressed (a
// 10,000,000-sample body is about 1 MB compressed, 20 MB decompressed).
func RemoteWriteBomb(samples int) []byte {
	var lb []byte
	lb = protowire.AppendTag(lb, 1, protowire.BytesType)
	lb = protowire.AppendString(lb, "__name__")
	lb = protowire.AppendTag(lb, 2, protowire.BytesType)
	lb = protowire.AppendString(lb, "bomb")
	ts := protowire.AppendTag(nil, 1, protowire.BytesType)
	ts = protowire.AppendBytes(ts, lb)
	empty := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.BytesType), 0)
	ts = append(ts, strings.Repeat(string(empty), samples)...)
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendBytes(req, ts)
	return snappy.Encode(nil, req)
}

// NestedQuery returns a SELECT whose WHERE clause nests depth parentheses.
func NestedQuery(depth int) string {
	return "SELECT v FROM m WHERE " + strings.Repeat("(", depth) + "v = 1" + strings.Repeat(")", depth) + " AND time > now() - 1h"
}

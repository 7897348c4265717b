package uplink

import (
	"math"
	"slices"
	"strings"

	"github.com/klauspost/compress/snappy"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// promEncoder writes a Prometheus remote-write WriteRequest (protobuf, snappy), with
// protowire as httpapi's receiver reads one: a series in Prometheus' model is
//   - a series written by Prometheus remote write: its labels again;
//   - a series written as line protocol: name <measurement>_<field>, its line tags as
//     labels;
//   - any other series: the key with characters outside [a-zA-Z0-9_:] made '_' as
//     name, and the key itself as label tsdht_key.
//
// A windowed uplink writes four series per series, the name suffixed _mean, _min,
// _max and _count. String series cannot be carried and are skipped.
type promEncoder struct {
	buf     []byte // WriteRequest: repeated TimeSeries, field 1
	ts      []byte // scratch: one TimeSeries
	out     []byte
	skipped int64
}

func (p *promEncoder) size() int { return len(p.buf) }
func (p *promEncoder) reset()    { p.buf = p.buf[:0] }
func (p *promEncoder) body() []byte {
	p.out = snappy.Encode(p.out[:cap(p.out)], p.buf)
	return p.out
}

type label struct{ k, v string }

func promName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

// promLabels returns a series' labels, __name__ first, without the name's suffix.
func promLabels(e *catalog.Entry) []label {
	var ls []label
	if n := tagOf(e, tagName); n != "" {
		for _, t := range e.Tags {
			ls = append(ls, label{t.K, t.V})
		}
	} else if m, f := tagOf(e, tagMeasurement), tagOf(e, tagField); m != "" && f != "" {
		_, _, tags := lineShape(e)
		ls = append(ls, label{tagName, promName(m + "_" + f)})
		for _, t := range tags {
			ls = append(ls, label{promName(t.K), t.V})
		}
	} else {
		ls = append(ls, label{tagName, promName(e.Key)}, label{"tsdht_key", e.Key})
	}
	slices.SortFunc(ls, func(a, b label) int { return strings.Compare(a.k, b.k) })
	return ls
}

// series appends one TimeSeries: labels (name suffixed), then samples.
func (p *promEncoder) series(ls []label, suffix string, n int, sample func(i int) (t int64, v float64, ok bool)) {
	p.ts = p.ts[:0]
	for _, l := range ls {
		v := l.v
		if l.k == tagName {
			v += suffix
		}
		var lb []byte
		lb = protowire.AppendTag(lb, 1, protowire.BytesType)
		lb = protowire.AppendString(lb, l.k)
		lb = protowire.AppendTag(lb, 2, protowire.BytesType)
		lb = protowire.AppendString(lb, v)
		p.ts = protowire.AppendTag(p.ts, 1, protowire.BytesType)
		p.ts = protowire.AppendBytes(p.ts, lb)
	}
	var sb [32]byte
	count := 0
	for i := range n {
		t, v, ok := sample(i)
		if !ok {
			continue
		}
		s := sb[:0]
		s = protowire.AppendTag(s, 1, protowire.Fixed64Type)
		s = protowire.AppendFixed64(s, math.Float64bits(v))
		s = protowire.AppendTag(s, 2, protowire.VarintType)
		s = protowire.AppendVarint(s, uint64(t/1e6)) // ms
		p.ts = protowire.AppendTag(p.ts, 2, protowire.BytesType)
		p.ts = protowire.AppendBytes(p.ts, s)
		count++
	}
	if count == 0 {
		return
	}
	p.buf = protowire.AppendTag(p.buf, 1, protowire.BytesType)
	p.buf = protowire.AppendBytes(p.buf, p.ts)
}

func (p *promEncoder) points(e *catalog.Entry, pts *series.Points) {
	switch pts.Type {
	case series.Float:
		p.series(promLabels(e), "", pts.Len(), func(i int) (int64, float64, bool) { return pts.T[i], pts.F[i], true })
	case series.Int:
		p.series(promLabels(e), "", pts.Len(), func(i int) (int64, float64, bool) { return pts.T[i], float64(pts.I[i]), true })
	default:
		p.skipped += int64(pts.Len())
	}
}

func (p *promEncoder) windows(e *catalog.Entry, ws []agg.Window) {
	ls := promLabels(e)
	for _, fn := range aggFns {
		p.series(ls, "_"+fn.String(), len(ws), func(i int) (int64, float64, bool) {
			v := ws[i].Eval(fn)
			switch v.Kind {
			case series.Float:
				return ws[i].Start, v.F, true
			case series.Int:
				return ws[i].Start, float64(v.I), true
			}
			return 0, 0, false
		})
	}
}

// Package export owns how series leave tsdht and come back: the three formats of
// `tsdht export` / `tsdht import` and of HTTP /api/v1/export and /api/v1/import —
// line protocol as `influx_inspect export` writes it (lp), CSV (csv) and
// VictoriaMetrics' JSON lines (jsonl) — and the streaming export loop that reads any
// range window by window, so that memory stays bounded whatever the range holds.
// It works over a Source (the CLI's is the cluster client, the HTTP surface's the
// node's httpapi.Engine); line protocol is named through httpapi.ParseLineProtocol,
// exactly as /write names it. docs/export.md describes the formats.
package export

import (
	"context"
	"fmt"
	"math"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Format is an export or import format.
type Format string

// The formats.
const (
	LP    Format = "lp"    // line protocol, with influx_inspect export's # DDL / # DML sections
	CSV   Format = "csv"   // key,type,time,value lines under that header
	JSONL Format = "jsonl" // VictoriaMetrics' JSON lines, one series' window per line
)

// ParseFormat returns the format named s.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case LP, CSV, JSONL:
		return f, nil
	}
	return "", fmt.Errorf("format %q: want lp, csv or jsonl", s)
}

// Series is one series to export: its key, type and catalog tags (sorted by key).
type Series struct {
	Key  string
	Type series.Type
	Tags []catalog.Tag
}

// Tag returns the value of tag k, "" when the series has none.
func (s *Series) Tag(k string) string {
	for _, t := range s.Tags {
		if t.K == k {
			return t.V
		}
	}
	return ""
}

// Source is what an export reads: the catalog's series and their points.
type Source interface {
	// Counts calls fn, ascending, with the start and point count of every non-empty
	// window of width every in [from, to) of the series (windows aligned to the epoch).
	Counts(ctx context.Context, key string, from, to, every int64, fn func(start, count int64) error) error
	// Read returns the points of the series with from <= t < to, ascending.
	Read(ctx context.Context, key string, from, to int64) (series.Points, error)
}

// PlanWidth is the width of the windows an export counts a series' points in before
// reading them. A read holds at most readPoints points, but where one millisecond
// holds more: what bounds an export's memory.
const PlanWidth = int64(3600e9)

// readPoints is how many points one read of an export holds at most (a variable for
// the tests).
var readPoints int64 = 50_000

// Stats is what an export did.
type Stats struct {
	Series int
	Points int64
}

// Export writes the points of every series of ss with from <= t < to to w, series by
// series, reading each in spans of at most readPoints points planned from per-window
// counts (a window holding more is counted again in windows 60 times narrower), so
// memory stays bounded for any range. progress, if not nil, is told after each read.
// w is not closed.
func Export(ctx context.Context, src Source, ss []Series, from, to int64, w Writer, progress func(Stats)) (Stats, error) {
	var st Stats
	if err := w.Begin(ss); err != nil {
		return st, err
	}
	for i := range ss {
		s := &ss[i]
		st.Series++
		read := func(lo, hi int64) error {
			pts, err := src.Read(ctx, s.Key, lo, hi)
			if err != nil {
				return fmt.Errorf("series %q: %w", s.Key, err)
			}
			if pts.Len() == 0 {
				return nil
			}
			if err := w.Points(s, &pts); err != nil {
				return err
			}
			st.Points += int64(pts.Len())
			if progress != nil {
				progress(st)
			}
			return nil
		}
		if err := plan(ctx, src, s.Key, from, to, PlanWidth, read); err != nil {
			return st, err
		}
	}
	return st, w.Close()
}

// plan reads [from, to) of a series through read in spans of consecutive windows of
// width every holding at most readPoints points together; a window holding more is
// planned again at a 60th of the width, down to a millisecond.
func plan(ctx context.Context, src Source, key string, from, to, every int64, read func(lo, hi int64) error) error {
	spanLo, spanHi, spanN := int64(0), int64(0), int64(0)
	flush := func() error {
		if spanN == 0 {
			return nil
		}
		spanN = 0
		return read(spanLo, spanHi)
	}
	err := src.Counts(ctx, key, from, to, every, func(start, count int64) error {
		lo, hi := max(start, from), min(satAdd(start, every), to)
		if spanN > 0 && (lo != spanHi || spanN+count > readPoints) {
			if err := flush(); err != nil {
				return err
			}
		}
		if count > readPoints && every >= 60e6 {
			return plan(ctx, src, key, lo, hi, every/60, read)
		}
		if spanN == 0 {
			spanLo = lo
		}
		spanHi, spanN = hi, spanN+count
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

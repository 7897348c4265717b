package agg

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Fn is an aggregate function of a window's points.
type Fn uint8

// The functions. Their names (String) are what `tsdht agg --fn` and InfluxQL take.
// Mean through Spread are answered by a Partial (Mergeable); Median and Percentile need
// every point of a window, so only a caller holding the points (the HTTP API) computes
// them, over the same Windows.
const (
	Mean Fn = iota + 1
	Min
	Max
	Count
	Sum
	First
	Last
	Stddev // sample standard deviation (n − 1), as InfluxDB's STDDEV
	Spread // max − min
	Median
	Percentile // InfluxQL's percentile(field, N): the point at rank ⌊n·N/100 + 0.5⌋
)

// fnNames is the one table of function names.
var fnNames = [...]string{Mean: "mean", Min: "min", Max: "max", Count: "count", Sum: "sum",
	First: "first", Last: "last", Stddev: "stddev", Spread: "spread", Median: "median", Percentile: "percentile"}

// String returns the function's name.
func (f Fn) String() string {
	if f >= Mean && int(f) < len(fnNames) {
		return fnNames[f]
	}
	return "fn(" + strconv.Itoa(int(f)) + ")"
}

// Valid reports whether f is a known function.
func (f Fn) Valid() bool { return f >= Mean && int(f) < len(fnNames) }

// Mergeable reports whether a Partial answers f: partials of disjoint sets of points
// merge into the partial of their union, so f of a window needs no point.
func (f Fn) Mergeable() bool { return f >= Mean && f <= Spread }

// Selector reports whether f's value is one point's value (min, max, first, last,
// percentile), whose time InfluxQL reports when the function is selected alone.
func (f Fn) Selector() bool {
	return f == Min || f == Max || f == First || f == Last || f == Percentile
}

// DefaultFns is what `tsdht agg` computes without --fn.
var DefaultFns = []Fn{Mean, Min, Max, Count}

// ParseFn returns the function named s, mergeable or not.
func ParseFn(s string) (Fn, error) {
	if f, ok := lookup(s); ok {
		return f, nil
	}
	return 0, fmt.Errorf("unknown aggregate function %q: want one of %s", s, names(Fn.Valid))
}

func lookup(s string) (Fn, bool) {
	for f, n := range fnNames {
		if n != "" && n == s {
			return Fn(f), true
		}
	}
	return 0, false
}

// names lists the names of the functions keep accepts, comma-separated.
func names(keep func(Fn) bool) string {
	var out []string
	for f, n := range fnNames {
		if n != "" && keep(Fn(f)) {
			out = append(out, n)
		}
	}
	return strings.Join(out, ", ")
}

// ParseFns parses a comma-separated list of mergeable function names, such as
// "mean,min,max": what partial aggregates answer without reading a point.
func ParseFns(s string) ([]Fn, error) {
	var fns []Fn
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		f, ok := lookup(name)
		if !ok || !f.Mergeable() {
			why := "unknown aggregate function"
			if ok {
				why = "needs every point of a window, which partial aggregates do not keep:"
			}
			return nil, fmt.Errorf("%s %q: want one of %s", why, name, names(Fn.Mergeable))
		}
		fns = append(fns, f)
	}
	return fns, nil
}

// Supports reports whether a Partial of a series of type t answers f: strings have
// only count, first and last.
func Supports(f Fn, t series.Type) bool {
	if t == series.String {
		return f == Count || f == First || f == Last
	}
	return f.Mergeable()
}

// Value is the result of a function: a float, an int, a string, or null (an empty
// window, the stddev of one point, a function a string series lacks).
type Value struct {
	Kind series.Type // Float, Int or String; Unknown is null
	F    float64
	I    int64
	S    string
}

// Null reports whether v is null.
func (v Value) Null() bool { return v.Kind == series.Unknown }

// String formats v as `tsdht agg` prints it: ints in decimal, floats in the shortest
// form that reads back exactly, strings as they are, null as "".
func (v Value) String() string {
	switch v.Kind {
	case series.Float:
		return strconv.FormatFloat(v.F, 'g', -1, 64)
	case series.Int:
		return strconv.FormatInt(v.I, 10)
	case series.String:
		return v.S
	}
	return ""
}

// Any returns v as a float64, int64, string or nil: for JSON.
func (v Value) Any() any {
	switch v.Kind {
	case series.Float:
		if math.IsNaN(v.F) || math.IsInf(v.F, 0) {
			return nil // JSON has no NaN or Inf
		}
		return v.F
	case series.Int:
		return v.I
	case series.String:
		return v.S
	}
	return nil
}

func fv(f float64) Value { return Value{Kind: series.Float, F: f} }
func iv(i int64) Value   { return Value{Kind: series.Int, I: i} }

// SelectedT returns the time of the point a selector chose (min, max, first, last),
// false when the partial lacks it (min and max of partials without extrema times).
func (p *Partial) SelectedT(f Fn) (int64, bool) {
	switch f {
	case Min:
		return p.MinT, p.HasExtremaT
	case Max:
		return p.MaxT, p.HasExtremaT
	case First:
		return p.FirstT, true
	case Last:
		return p.LastT, true
	}
	return 0, false
}

// Eval returns f of the partial's points. Count is an int; mean and stddev are floats;
// min, max, first, last and spread have the series' type (spread of ints is a float
// when it overflows int64, and so is sum).
func (p *Partial) Eval(f Fn) Value {
	if p.Count == 0 || !Supports(f, p.Type) {
		if f == Count {
			return iv(p.Count)
		}
		return Value{}
	}
	switch f {
	case Count:
		return iv(p.Count)
	case Mean:
		return fv(p.Mean())
	case Stddev:
		if p.Count < 2 {
			return Value{}
		}
		return fv(math.Sqrt(max(p.M2, 0) / float64(p.Count-1)))
	case Sum:
		if p.Type == series.Int {
			if v, ok := p.ISum.Int64(); ok {
				return iv(v)
			}
		}
		return fv(p.SumFloat())
	}
	switch p.Type {
	case series.Float:
		switch f {
		case Min:
			return fv(p.Min)
		case Max:
			return fv(p.Max)
		case First:
			return fv(p.First)
		case Last:
			return fv(p.Last)
		case Spread:
			return fv(p.Max - p.Min)
		}
	case series.Int:
		switch f {
		case Min:
			return iv(p.IMin)
		case Max:
			return iv(p.IMax)
		case First:
			return iv(p.IFirst)
		case Last:
			return iv(p.ILast)
		case Spread:
			d := p.IMax - p.IMin
			if d < 0 { // overflowed
				return fv(float64(p.IMax) - float64(p.IMin))
			}
			return iv(d)
		}
	case series.String:
		switch f {
		case First:
			return Value{Kind: series.String, S: p.SFirst}
		case Last:
			return Value{Kind: series.String, S: p.SLast}
		}
	}
	return Value{}
}

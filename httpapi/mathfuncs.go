package httpapi

import (
	"math"

	"github.com/influxdata/influxql"
)

// mathFunc is one of InfluxQL's scalar math functions (abs, floor, pow, …): evaluated
// per row on the values of its arguments, fields or aggregates alike.
type mathFunc struct {
	args int // how many arguments it takes
	// keepInt: an integer argument gives an integer (abs, floor, ceil, round), as
	// InfluxDB answers; the others answer a float.
	keepInt bool
	f       func(x ...float64) float64
}

// mathFuncs are the scalar functions InfluxDB 1.x evaluates in a SELECT.
var mathFuncs = map[string]mathFunc{
	"abs":   {1, true, func(x ...float64) float64 { return math.Abs(x[0]) }},
	"floor": {1, true, func(x ...float64) float64 { return math.Floor(x[0]) }},
	"ceil":  {1, true, func(x ...float64) float64 { return math.Ceil(x[0]) }},
	"round": {1, true, func(x ...float64) float64 { return math.Round(x[0]) }},
	"sqrt":  {1, false, func(x ...float64) float64 { return math.Sqrt(x[0]) }},
	"exp":   {1, false, func(x ...float64) float64 { return math.Exp(x[0]) }},
	"ln":    {1, false, func(x ...float64) float64 { return math.Log(x[0]) }},
	"log2":  {1, false, func(x ...float64) float64 { return math.Log2(x[0]) }},
	"log10": {1, false, func(x ...float64) float64 { return math.Log10(x[0]) }},
	"log":   {2, false, func(x ...float64) float64 { return math.Log(x[0]) / math.Log(x[1]) }},
	"pow":   {2, false, func(x ...float64) float64 { return math.Pow(x[0], x[1]) }},
	"sin":   {1, false, func(x ...float64) float64 { return math.Sin(x[0]) }},
	"cos":   {1, false, func(x ...float64) float64 { return math.Cos(x[0]) }},
	"tan":   {1, false, func(x ...float64) float64 { return math.Tan(x[0]) }},
	"asin":  {1, false, func(x ...float64) float64 { return math.Asin(x[0]) }},
	"acos":  {1, false, func(x ...float64) float64 { return math.Acos(x[0]) }},
	"atan":  {1, false, func(x ...float64) float64 { return math.Atan(x[0]) }},
	"atan2": {2, false, func(x ...float64) float64 { return math.Atan2(x[0], x[1]) }},
}

// callMath evaluates a scalar math function on argument values: nil (null) when any
// argument is null or not a number, or when the result is not a number (the JSON answer
// has no NaN).
func callMath(name string, args []any) (any, bool) {
	fn, ok := mathFuncs[name]
	if !ok || len(args) != fn.args {
		return nil, false
	}
	xs := make([]float64, len(args))
	allInt := true
	for i, a := range args {
		switch v := a.(type) {
		case float64:
			xs[i], allInt = v, false
		case int64:
			xs[i] = float64(v)
		case uint64:
			xs[i] = float64(v)
		default:
			return nil, true
		}
	}
	if fn.keepInt && allInt {
		if i, ok := args[0].(int64); ok {
			if name == "abs" && i < 0 {
				return -i, true
			}
			return i, true
		}
	}
	r := fn.f(xs...)
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return nil, true
	}
	return r, true
}

// Call makes baseValuer an influxql.CallValuer for the scalar math functions.
func (b baseValuer) Call(name string, args []any) (any, bool) { return callMath(name, args) }

var _ influxql.CallValuer = baseValuer(nil)

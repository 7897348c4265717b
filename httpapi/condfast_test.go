package httpapi

import (
	"math/rand/v2"
	"testing"

	"github.com/influxdata/influxql"
)

// The compiled condition answers as influxql's evaluator does, over nulls, integers
// and floats on either side of the literal; what it does not compile is left to it.
func TestCompiledCondMatchesInfluxQL(t *testing.T) {
	index := map[string]int{"a": 0, "b": 1}
	for _, src := range []string{
		"a > 90", "a > 90.0", "a >= 3", "a < 3.5", "a <= -1", "a = 3", "a != 3", "a = 3.0", "a != 2.5",
		"90 < a", "3.5 >= b", "a > 1 AND b <= 0.1", "a > 1 OR b <= 0.1", "(a > 1 OR a < -1) AND b != 0",
		"a > 1 AND (b = 3 OR true)", "false OR a = 2",
	} {
		cond := influxql.MustParseExpr(src)
		fast := compileCond(cond, index)
		if fast == nil {
			t.Fatalf("%s: not compiled", src)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 2000 {
			vals := make([]numVal, 2)
			m := influxql.MapValuer{}
			for k, name := range []string{"a", "b"} {
				switch rng.IntN(4) {
				case 0: // null
				case 1:
					vals[k] = numVal{has: true, isInt: true, i: int64(rng.IntN(7) - 3)}
					m[name] = vals[k].i
				case 2:
					vals[k] = numVal{has: true, f: float64(rng.IntN(7) - 3)}
					m[name] = vals[k].f
				default:
					vals[k] = numVal{has: true, f: rng.Float64()*200 - 100}
					m[name] = vals[k].f
				}
			}
			want := (&influxql.ValuerEval{Valuer: m}).EvalBool(cond)
			if got := fast(vals); got != want {
				t.Fatalf("%s at %v: compiled %v, influxql %v", src, m, got, want)
			}
		}
	}
	for _, src := range []string{"a * 2 > 3", "a > b", "a::float > 3", "a = 'x'", "a =~ /x/", "c > 1", "a > 1 AND b = 'x'"} {
		if compileCond(influxql.MustParseExpr(src), index) != nil {
			t.Errorf("%s: compiled, want it left to influxql's evaluator", src)
		}
	}
}

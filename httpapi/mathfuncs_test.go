package httpapi

import (
	"math"
	"testing"
)

func TestCallMath(t *testing.T) {
	cases := []struct {
		name string
		args []any
		want any
	}{
		// abs of an integer is its absolute value (InfluxDB 1.6 answers the integer
		// unchanged, which later releases fixed; the differential test leaves it out).
		{"abs", []any{int64(-5)}, int64(5)},
		{"abs", []any{-2.5}, 2.5},
		{"floor", []any{int64(7)}, int64(7)},
		{"floor", []any{-1.5}, -2.0},
		{"ceil", []any{1.2}, 2.0},
		{"round", []any{2.5}, 3.0},
		{"pow", []any{2.0, int64(10)}, 1024.0},
		{"log", []any{100.0, 10.0}, 2.0},
		{"sqrt", []any{-1.0}, nil}, // NaN: null, as the JSON answer has no NaN
		{"ln", []any{0.0}, nil},    // −Inf: null
		{"floor", []any{nil}, nil}, // a null argument: null
		{"floor", []any{"x"}, nil}, // a string: null
		{"atan2", []any{1.0, 1.0}, math.Pi / 4},
	}
	for _, c := range cases {
		got, ok := callMath(c.name, c.args)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v, %v; want %v", c.name, c.args, got, ok, c.want)
		}
	}
	if _, ok := callMath("floor", []any{1.0, 2.0}); ok {
		t.Error("floor with two arguments evaluated")
	}
	if _, ok := callMath("nosuch", []any{1.0}); ok {
		t.Error("an unknown function evaluated")
	}
}

package httpapi

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/agg"
)

// A SELECT's fields are compiled into base columns — fields read raw, or aggregates of
// one field — which the executor reads as before, and outputs computed from them
// afterwards (project): the base column itself, math between base columns and numbers
// (influxql's own evaluator, as InfluxDB's), or a transformation of one base column's
// values over time — derivative, non_negative_derivative, difference,
// non_negative_difference, moving_average, cumulative_sum, elapsed — with InfluxDB 1.x's
// semantics: over the points of the field (raw) or the windows of GROUP BY time()
// (empty windows skipped unless fill() filled them), a transformation of windows
// seeing the window before the statement's first.

// errUnsupported is wrapped by refusals of InfluxQL that tsdht does not answer:
// /query answers them with 400 rather than an answer that might differ from InfluxDB's.
var errUnsupported = errors.New("not supported by tsdht")

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUnsupported, fmt.Sprintf(format, args...))
}

// output is one column of the answer.
type output struct {
	base int           // the base column shown as it is, when math and tr are nil
	math influxql.Expr // math over base columns, its leaves VarRefs named by baseRef
	tr   *transform
}

// transform is a transformation of one base column's values over time.
type transform struct {
	fn   string
	base int
	unit int64 // derivative's and elapsed's unit, ns
	n    int   // moving_average's window
}

// baseRef names base column i inside a compiled math expression.
func baseRef(i int) string { return "\x00" + strconv.Itoa(i) }

// transforms are the transformations answered, with their number of arguments.
var transforms = map[string][2]int{
	"derivative": {1, 2}, "non_negative_derivative": {1, 2}, "difference": {1, 1}, "non_negative_difference": {1, 1},
	"moving_average": {2, 2}, "cumulative_sum": {1, 1}, "elapsed": {1, 2},
}

// compiler builds a plan's base columns and outputs.
type compiler struct {
	cols  []column
	index map[string]int // a base expression's text → its column
	nraw  int            // base columns read raw
	nagg  int            // aggregates
	trRaw bool           // a transformation of raw values
	trAgg bool           // a transformation of aggregates
	plain bool           // an output that is no transformation
	leafs []int          // base columns of raw fields in math
}

// baseColumn returns the base column of a field or an aggregate call, adding it.
func (c *compiler) baseColumn(e influxql.Expr) (int, error) {
	if i, ok := c.index[e.String()]; ok {
		return i, nil
	}
	var col column
	switch e := e.(type) {
	case *influxql.VarRef:
		col.field = e.Val
		col.tag = e.Type == influxql.Tag
		c.nraw++
	case *influxql.Call:
		if e.Name == "mode" || e.Name == "integral" {
			if err := specialColumn(e, &col); err != nil {
				return 0, err
			}
			c.nagg++
			break
		}
		fn, err := agg.ParseFn(e.Name)
		if err != nil {
			return 0, unsupported("function %s()", e.Name)
		}
		want := 1
		if fn == agg.Percentile {
			want = 2
		}
		if len(e.Args) != want {
			return 0, fmt.Errorf("invalid number of arguments for %s, expected %d, got %d", e.Name, want, len(e.Args))
		}
		ref, ok := e.Args[0].(*influxql.VarRef)
		if !ok {
			return 0, unsupported("%s() of %s (the argument must be a field)", e.Name, e.Args[0])
		}
		col.field, col.fn = ref.Val, fn
		if want == 2 {
			switch n := e.Args[1].(type) {
			case *influxql.NumberLiteral:
				col.arg = n.Val
			case *influxql.IntegerLiteral:
				col.arg = float64(n.Val)
			default:
				return 0, fmt.Errorf("expected float argument in percentile()")
			}
			if col.arg < 0 || col.arg > 100 {
				return 0, fmt.Errorf("percentile(): N %v must be 0..100", col.arg)
			}
		}
		c.nagg++
	default:
		return 0, unsupported("expression %s", e)
	}
	if c.index == nil {
		c.index = map[string]int{}
	}
	c.index[e.String()] = len(c.cols)
	c.cols = append(c.cols, col)
	return len(c.cols) - 1, nil
}

// field compiles one selected expression.
func (c *compiler) field(e influxql.Expr) (output, error) {
	switch e := e.(type) {
	case *influxql.VarRef:
		i, err := c.baseColumn(e)
		c.plain = true
		return output{base: i}, err
	case *influxql.Call:
		if _, ok := transforms[e.Name]; ok {
			return c.transform(e)
		}
		if _, ok := mathFuncs[e.Name]; ok {
			m, err := c.math(e)
			c.plain = true
			return output{math: m}, err
		}
		i, err := c.baseColumn(e)
		c.plain = true
		return output{base: i}, err
	case *influxql.BinaryExpr, *influxql.ParenExpr:
		m, err := c.math(e)
		c.plain = true
		return output{math: m}, err
	}
	return output{}, unsupported("expression %s", e)
}

// math compiles an arithmetic expression over fields, aggregates and numbers.
func (c *compiler) math(e influxql.Expr) (influxql.Expr, error) {
	switch e := e.(type) {
	case *influxql.ParenExpr:
		inner, err := c.math(e.Expr)
		return &influxql.ParenExpr{Expr: inner}, err
	case *influxql.BinaryExpr:
		switch e.Op {
		case influxql.ADD, influxql.SUB, influxql.MUL, influxql.DIV, influxql.MOD:
		default:
			return nil, unsupported("operator %s in %s", e.Op, e)
		}
		l, err := c.math(e.LHS)
		if err != nil {
			return nil, err
		}
		r, err := c.math(e.RHS)
		return &influxql.BinaryExpr{Op: e.Op, LHS: l, RHS: r}, err
	case *influxql.NumberLiteral, *influxql.IntegerLiteral:
		return e, nil
	case *influxql.VarRef:
		if e.Type == influxql.Tag {
			return nil, unsupported("math on tag %s", e.Val)
		}
	case *influxql.Call:
		if _, ok := transforms[e.Name]; ok {
			return nil, unsupported("math on %s()", e.Name)
		}
		if fn, ok := mathFuncs[e.Name]; ok {
			if len(e.Args) != fn.args {
				return nil, fmt.Errorf("invalid number of arguments for %s, expected %d, got %d", e.Name, fn.args, len(e.Args))
			}
			args := make([]influxql.Expr, len(e.Args))
			for i, a := range e.Args {
				var err error
				if args[i], err = c.math(a); err != nil {
					return nil, err
				}
			}
			return &influxql.Call{Name: e.Name, Args: args}, nil
		}
	default:
		return nil, unsupported("%s in math", e)
	}
	i, err := c.baseColumn(e)
	if _, ok := e.(*influxql.VarRef); ok {
		c.leafs = append(c.leafs, i)
	}
	return &influxql.VarRef{Val: baseRef(i)}, err
}

// transform compiles a transformation call.
func (c *compiler) transform(e *influxql.Call) (output, error) {
	n := transforms[e.Name]
	if len(e.Args) < n[0] || len(e.Args) > n[1] {
		return output{}, fmt.Errorf("invalid number of arguments for %s, expected %d, got %d", e.Name, n[0], len(e.Args))
	}
	tr := &transform{fn: e.Name}
	switch in := e.Args[0].(type) {
	case *influxql.VarRef:
		c.trRaw = true
	case *influxql.Call:
		if _, nested := transforms[in.Name]; nested {
			return output{}, unsupported("%s() of %s()", e.Name, in.Name)
		}
		c.trAgg = true
	default:
		return output{}, unsupported("%s() of %s", e.Name, e.Args[0])
	}
	i, err := c.baseColumn(e.Args[0])
	if err != nil {
		return output{}, err
	}
	tr.base = i
	switch e.Name {
	case "moving_average":
		lit, ok := e.Args[1].(*influxql.IntegerLiteral)
		if !ok {
			return output{}, fmt.Errorf("second argument for moving_average must be an integer, got %T", e.Args[1])
		}
		if lit.Val <= 1 {
			return output{}, fmt.Errorf("moving_average window must be greater than 1, got %d", lit.Val)
		}
		if lit.Val > 1<<20 {
			return output{}, unsupported("moving_average window of %d (at most %d)", lit.Val, 1<<20)
		}
		tr.n = int(lit.Val)
	case "derivative", "non_negative_derivative", "elapsed":
		if len(e.Args) == 2 {
			d, ok := e.Args[1].(*influxql.DurationLiteral)
			if !ok {
				return output{}, fmt.Errorf("second argument to %s must be a duration, got %T", e.Name, e.Args[1])
			}
			if d.Val <= 0 {
				return output{}, fmt.Errorf("duration argument must be positive, got %s", d)
			}
			tr.unit = int64(d.Val)
		}
	}
	return output{base: i, tr: tr}, nil
}

// compileFields compiles the fields of s into p's base columns and outputs; every
// is the GROUP BY time() interval (0 without).
func compileFields(s *influxql.SelectStatement, every time.Duration, p *selectPlan) error {
	var c compiler
	outs := make([]output, len(s.Fields))
	identity := true
	for i, f := range s.Fields {
		o, err := c.field(f.Expr)
		if err != nil {
			return err
		}
		outs[i] = o
		identity = identity && o.math == nil && o.tr == nil && o.base == i
	}
	if c.nraw > 0 && c.nagg > 0 {
		return errors.New("mixing aggregate and non-aggregate queries is not supported")
	}
	if c.trRaw && c.plain {
		return errors.New("mixing aggregate and non-aggregate queries is not supported")
	}
	if c.trAgg && every == 0 {
		return fmt.Errorf("%s aggregate requires a GROUP BY interval", firstTransform(outs))
	}
	for _, col := range c.cols {
		switch {
		case col.special == "integral" && every > 0:
			return unsupported("integral() with GROUP BY time() (InfluxDB answers a group's last window as a series of its own)")
		case col.special == "integral" && len(s.Fields) > 1:
			return unsupported("integral() beside other columns (InfluxDB answers them in separate rows)")
		}
	}
	p.cols, p.raw = c.cols, c.nagg == 0
	if !identity {
		p.outs = outs
	}
	p.transforms, p.plain, p.mathFields = c.trRaw || c.trAgg, c.plain, c.leafs
	for _, o := range outs {
		if o.tr == nil {
			continue
		}
		if o.tr.unit == 0 {
			switch {
			case o.tr.fn == "elapsed":
				o.tr.unit = 1
			case every > 0:
				o.tr.unit = int64(every)
			default:
				o.tr.unit = int64(time.Second)
			}
		}
		if every > 0 && o.tr.fn != "cumulative_sum" {
			p.lookBack = true
		}
	}
	return nil
}

func firstTransform(outs []output) string {
	for _, o := range outs {
		if o.tr != nil {
			return o.tr.fn
		}
	}
	return ""
}

// value computes an output without transformation from one row of base values
// (row[0] the time).
func (o *output) value(row []any) any {
	if o.math == nil {
		return row[o.base+1]
	}
	return (&influxql.ValuerEval{Valuer: baseValuer(row), IntegerFloatDivision: true}).Eval(o.math)
}

// baseValuer is influxql.Valuer over a row of base values, by baseRef names.
type baseValuer []any

func (b baseValuer) Value(key string) (any, bool) {
	if len(key) < 2 || key[0] != 0 {
		return nil, false
	}
	i, err := strconv.Atoi(key[1:])
	if err != nil || i+1 >= len(b) {
		return nil, false
	}
	return b[i+1], true
}

// project computes a group's output columns from the rows of its base columns. Rows
// before keepFrom are the look-back of transformations: dropped.
//
// With a look-back, plain holds the rows of the base columns over the statement's own
// range, for the outputs that are no transformation (nil: r's rows serve all).
func (p *selectPlan) project(r, plain *row) (*row, error) {
	if p.outs == nil {
		return r, nil
	}
	in := r.Values
	if r.table != nil {
		in = r.table.values()
	}
	plainIn := in
	if plain != nil {
		plainIn = plain.Values
	}
	if !p.transforms {
		out := make([][]any, len(in))
		for k, row := range in {
			o := make([]any, len(p.outs)+1)
			o[0] = row[0]
			for c := range p.outs {
				o[c+1] = p.outs[c].value(row)
			}
			out[k] = o
		}
		return &row{Values: out}, nil
	}
	// Each output puts its values at their times; the rows are the times any output
	// has (a value or a null of its own), ascending.
	byTime := map[tsValue][]any{}
	at := func(t tsValue) []any {
		o, ok := byTime[t]
		if !ok {
			o = make([]any, len(p.outs)+1)
			o[0] = t
			byTime[t] = o
		}
		return o
	}
	for c := range p.outs {
		o := &p.outs[c]
		if o.tr == nil {
			for _, row := range plainIn {
				at(row[0].(tsValue))[c+1] = o.value(row)
			}
			continue
		}
		var ts []int64
		var vs []any
		for _, row := range in {
			if v := row[o.tr.base+1]; v != nil {
				ts, vs = append(ts, int64(row[0].(tsValue))), append(vs, v)
			}
		}
		if err := o.tr.apply(ts, vs, func(t int64, v any) { at(tsValue(t))[c+1] = v }); err != nil {
			return nil, err
		}
	}
	out := make([][]any, 0, len(byTime))
	for t, o := range byTime {
		if int64(t) >= p.keepFrom {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b []any) int { return cmp.Compare(a[0].(tsValue), b[0].(tsValue)) })
	return &row{Values: out}, nil
}

// apply runs the transformation over the values vs at times ts (ascending), emitting
// its points.
func (tr *transform) apply(ts []int64, vs []any, emit func(int64, any)) error {
	for _, v := range vs {
		switch v.(type) {
		case float64, int64:
		default:
			return fmt.Errorf("unsupported %s iterator type: %T", tr.fn, v)
		}
	}
	switch tr.fn {
	case "derivative", "non_negative_derivative":
		for i := 1; i < len(vs); i++ {
			diff := toFloat(vs[i]) - toFloat(vs[i-1])
			if tr.fn == "non_negative_derivative" && diff < 0 {
				continue
			}
			emit(ts[i], diff/(float64(ts[i]-ts[i-1])/float64(tr.unit)))
		}
	case "difference", "non_negative_difference":
		for i := 1; i < len(vs); i++ {
			var d any
			neg := false
			if a, ok := vs[i].(int64); ok {
				b, _ := vs[i-1].(int64)
				d, neg = a-b, a-b < 0
			} else {
				x := toFloat(vs[i]) - toFloat(vs[i-1])
				d, neg = x, x < 0
			}
			if tr.fn == "non_negative_difference" && neg {
				continue
			}
			emit(ts[i], d)
		}
	case "elapsed":
		for i := 1; i < len(ts); i++ {
			emit(ts[i], (ts[i]-ts[i-1])/tr.unit)
		}
	case "cumulative_sum":
		var fs float64
		var is int64
		for i, v := range vs {
			if x, ok := v.(int64); ok {
				is += x
				emit(ts[i], is)
			} else {
				fs += v.(float64)
				emit(ts[i], fs)
			}
		}
	case "moving_average":
		// A ring of the last n values and their running sum, summed in InfluxDB's order.
		buf := make([]float64, 0, tr.n)
		sum, pos := 0.0, 0
		for i, v := range vs {
			x := toFloat(v)
			if len(buf) != cap(buf) {
				buf = append(buf, x)
			} else {
				sum -= buf[pos]
				buf[pos] = x
			}
			sum += x
			if pos++; pos >= cap(buf) {
				pos = 0
			}
			if len(buf) == cap(buf) {
				emit(ts[i], sum/float64(len(buf)))
			}
		}
	}
	return nil
}

// checkMathFields refuses math on a name that is no field of the measurement (a tag,
// or nothing): InfluxDB answers that with a type error or an empty series, depending
// on what the name is, which only the measurement's schema tells.
func (p *selectPlan) checkMathFields() error {
	for _, i := range p.mathFields {
		found := false
		for _, g := range p.groups {
			found = found || len(g.keys[i]) > 0
		}
		if !found {
			return unsupported("math on %s, which no series of the measurement holds as a field", p.cols[i].field)
		}
	}
	return nil
}

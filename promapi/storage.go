package promapi

import (
	"context"
	"errors"
	"sort"
	"sync"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/tsdht/tsdht/internal/netyield"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Catalog lists the series of the cluster's series catalog; the node's coordinator
// (tsdb/coord) is one.
type Catalog interface {
	Series(ctx context.Context, q catalog.Query) ([]catalog.Entry, error)
}

// Reader reads the points of one series, complete or failed; the node's coordinator
// is one.
type Reader interface {
	Get(ctx context.Context, key string, from, to int64, opt wire.GetOptions) (wire.Result, error)
}

// Backend is what PromQL and remote read need of a cluster.
type Backend interface {
	Catalog
	Reader
}

// readConcurrency bounds the series one Select reads at once.
const readConcurrency = 4

// Queryable is the storage.Queryable of a tsdht cluster: selectors choose series in
// the catalog by their labels (entryLabels), and the chosen series are read whole
// over the query's range. Limits bound what one Select holds.
type Queryable struct {
	b          Backend
	maxSeries  int
	maxSamples int
}

// NewQueryable returns the Queryable over b; one Select reads at most maxSeries
// series and maxSamples samples.
func NewQueryable(b Backend, maxSeries, maxSamples int) *Queryable {
	return &Queryable{b: b, maxSeries: maxSeries, maxSamples: maxSamples}
}

// Querier implements storage.Queryable.
func (q *Queryable) Querier(mint, maxt int64) (storage.Querier, error) {
	return &querier{q: q, mint: mint, maxt: maxt, pace: netyield.NewPacer(sampleYieldEvery, func() { sampleYield() })}, nil
}

type querier struct {
	q          *Queryable
	mint, maxt int64 // ms, inclusive
	// pace is spent a sample each time the engine reads one of the series selected,
	// and gives up the core every sampleYieldEvery (netyield): Go's scheduler has no
	// priorities, and on a node with one core an RPC writer's request that arrives
	// while a query is evaluated would otherwise wait for its end, or 10 ms. The
	// engine evaluates a query on one goroutine, through one querier.
	pace *netyield.Pacer
}

// sampleYieldEvery is how many sample reads of the PromQL engine pass between two
// yields of the core.
const sampleYieldEvery = 4096

// sampleYield is what a querier's pacer calls (netyield.Yield; a test counts the calls).
var sampleYield = netyield.Yield

func (qr *querier) Close() error { return nil }

// Select implements storage.Querier: the series are always returned sorted.
func (qr *querier) Select(ctx context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	mint, maxt := qr.mint, qr.maxt
	if hints != nil {
		mint, maxt = max(mint, hints.Start), min(maxt, hints.End)
	}
	mint, maxt = max(mint, minTime), min(maxt, maxTime)
	labelsOnly := hints != nil && hints.Func == "series"
	limit := qr.q.maxSeries
	if labelsOnly {
		limit = catalog.MaxListed // no point is read: the catalog's own bound
	}
	sel, err := selectSeries(ctx, qr.q.b, ms, mint, maxt, limit)
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	if labelsOnly {
		// Only the labels are wanted (/api/v1/series): read no point.
		out := make([]storage.Series, len(sel))
		for i, s := range sel {
			out[i] = &memSeries{lset: s.labels}
		}
		return &seriesSet{list: out}
	}
	read, err := readAll(ctx, qr.q.b, sel, mint, maxt, qr.q.maxSamples, qr.pace)
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	return &seriesSet{list: read}
}

// readAll reads the selected series over [mint, maxt] ms, at most readConcurrency at
// once, and fails once more than maxSamples samples were read. A series deleted
// since it was listed is left out. Reading the series' samples spends pace.
func readAll(ctx context.Context, r Reader, sel []selected, mint, maxt int64, maxSamples int, pace *netyield.Pacer) ([]storage.Series, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]*memSeries, len(sel))
	var (
		mu    sync.Mutex
		total int
		first error
		wg    sync.WaitGroup
	)
	slots := make(chan struct{}, readConcurrency)
	for i, s := range sel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			ms, err := readSeries(ctx, r, s, mint, maxt)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && ms != nil {
				total += len(ms.s)
				if total > maxSamples {
					err = &LimitError{What: "samples", Limit: maxSamples, Hint: "query a shorter range or fewer series"}
				}
			}
			if err != nil && first == nil {
				first = err
				cancel()
			}
			out[i] = ms
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	list := make([]storage.Series, 0, len(out))
	for _, s := range out {
		if s != nil {
			s.pace = pace
			list = append(list, s)
		}
	}
	return list, nil
}

// readSeries reads one series over [mint, maxt] ms as float samples of ms
// timestamps, the last of the points within one millisecond. nil: the series is
// gone.
func readSeries(ctx context.Context, r Reader, s selected, mint, maxt int64) (*memSeries, error) {
	from, to := mint*1e6, (maxt+1)*1e6
	if e := &s.entry; e.HasBounds {
		// Never ask for quanta before the first or after the last point written.
		from, to = max(from, e.First), min(to, e.Last+1)
	}
	if from >= to {
		return nil, nil
	}
	res, err := r.Get(ctx, s.entry.Key, from, to, wire.GetOptions{})
	if err != nil {
		if code(err) == wire.CodeUnknownSeries {
			return nil, nil
		}
		return nil, err
	}
	p := &res.Points
	ms := &memSeries{lset: s.labels, s: make([]fsample, 0, p.Len())}
	for i, t := range p.T {
		var v float64
		switch p.Type {
		case series.Float:
			v = p.F[i]
		case series.Int:
			v = float64(p.I[i])
		default:
			return nil, nil // strings, written since the catalog was read
		}
		t = floorDiv(t, 1e6)
		if n := len(ms.s); n > 0 && ms.s[n-1].t == t {
			ms.s[n-1].v = v
			continue
		}
		ms.s = append(ms.s, fsample{t, v})
	}
	return ms, nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// code returns the machine-readable code of a tsdb/rpc error, or "".
func code(err error) string {
	var coded interface{ ErrorCode() string }
	if errors.As(err, &coded) {
		return coded.ErrorCode()
	}
	return ""
}

// LabelValues implements storage.LabelQuerier from the selected series' labels.
func (qr *querier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	set := make(map[string]struct{})
	err := qr.eachLabels(ctx, ms, func(l labels.Labels) {
		if v := l.Get(name); v != "" {
			set[v] = struct{}{}
		}
	})
	return sortedLimited(set, hints), nil, err
}

// LabelNames implements storage.LabelQuerier from the selected series' labels.
func (qr *querier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	set := make(map[string]struct{})
	err := qr.eachLabels(ctx, ms, func(l labels.Labels) {
		l.Range(func(l labels.Label) { set[l.Name] = struct{}{} })
	})
	return sortedLimited(set, hints), nil, err
}

func (qr *querier) eachLabels(ctx context.Context, ms []*labels.Matcher, fn func(labels.Labels)) error {
	// No point is read: the catalog's own bound applies, not MaxSeries, so that
	// Grafana's label browser works over a catalog of any size.
	sel, err := selectSeries(ctx, qr.q.b, ms, max(qr.mint, minTime), min(qr.maxt, maxTime), catalog.MaxListed)
	for _, s := range sel {
		fn(s.labels)
	}
	return err
}

func sortedLimited(set map[string]struct{}, hints *storage.LabelHints) []string {
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Strings(out)
	if hints != nil && hints.Limit > 0 && len(out) > hints.Limit {
		out = out[:hints.Limit]
	}
	return out
}

// seriesSet is a storage.SeriesSet over series read whole.
type seriesSet struct {
	list []storage.Series
	i    int
}

func (s *seriesSet) Next() bool {
	if s.i >= len(s.list) {
		return false
	}
	s.i++
	return true
}
func (s *seriesSet) At() storage.Series                { return s.list[s.i-1] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// memSeries is one series read: float samples at ms timestamps, ascending. It is
// its own storage.Samples, so that upstream's list iterator walks it.
type memSeries struct {
	lset labels.Labels
	s    []fsample
	pace *netyield.Pacer // its querier's; nil: none
}

func (s *memSeries) Labels() labels.Labels { return s.lset }

func (s *memSeries) Iterator(chunkenc.Iterator) chunkenc.Iterator {
	return storage.NewListSeriesIterator(s)
}

// Get implements storage.Samples.
func (s *memSeries) Get(i int) chunks.Sample {
	s.pace.Spend(1)
	return &s.s[i]
}

// Len implements storage.Samples.
func (s *memSeries) Len() int { return len(s.s) }

// fsample is one float sample; a pointer to it is a chunks.Sample.
type fsample struct {
	t int64
	v float64
}

func (f *fsample) T() int64                      { return f.t }
func (f *fsample) ST() int64                     { return 0 }
func (f *fsample) F() float64                    { return f.v }
func (f *fsample) H() *histogram.Histogram       { return nil }
func (f *fsample) FH() *histogram.FloatHistogram { return nil }
func (f *fsample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (f *fsample) Copy() chunks.Sample           { c := *f; return &c }

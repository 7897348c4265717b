package export

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/httpapi"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// memStore is a Source and a Sink in memory: what the tests export from and import to.
type memStore struct {
	pts   map[string]*series.Points
	tags  map[string]map[string]string
	reads int
	most  int // most points one read returned
}

func newMem() *memStore {
	return &memStore{pts: map[string]*series.Points{}, tags: map[string]map[string]string{}}
}

func (m *memStore) Write(_ context.Context, ws []Write) (int64, error) {
	var n int64
	for _, w := range ws {
		p := m.pts[w.Key]
		if p == nil {
			p = &series.Points{}
			m.pts[w.Key] = p
		}
		for i := range w.Pts.T {
			p.AppendFrom(&w.Pts, i)
		}
		if len(w.Tags) > 0 {
			m.tags[w.Key] = w.Tags
		}
		n += int64(w.Pts.Len())
	}
	return n, nil
}

func (m *memStore) series() []Series {
	var out []Series
	for k, p := range m.pts {
		s := Series{Key: k, Type: p.Type}
		for tk, tv := range m.tags[k] {
			s.Tags = append(s.Tags, catalog.Tag{K: tk, V: tv})
		}
		sort.Slice(s.Tags, func(i, j int) bool { return s.Tags[i].K < s.Tags[j].K })
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (m *memStore) Read(_ context.Context, key string, from, to int64) (series.Points, error) {
	m.reads++
	var out series.Points
	p := m.pts[key]
	for i := range p.T {
		if p.T[i] >= from && p.T[i] < to {
			out.AppendFrom(p, i)
		}
	}
	m.most = max(m.most, out.Len())
	return out, nil
}

func (m *memStore) Counts(_ context.Context, key string, from, to, every int64, fn func(start, count int64) error) error {
	counts := map[int64]int64{}
	for _, t := range m.pts[key].T {
		if t >= from && t < to {
			counts[agg.WindowStart(t, every)]++
		}
	}
	var starts []int64
	for s := range counts {
		starts = append(starts, s)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	for _, s := range starts {
		if err := fn(s, counts[s]); err != nil {
			return err
		}
	}
	return nil
}

// sorted returns each series' points sorted by time (the memory store keeps arrival
// order).
func (m *memStore) sorted() map[string]series.Points {
	out := map[string]series.Points{}
	for k := range m.pts {
		p, _ := m.Read(context.Background(), k, math.MinInt64, math.MaxInt64)
		p.Normalize()
		out[k] = p
	}
	return out
}

// importAll reads input of format f into a fresh memory store.
func importAll(t *testing.T, f Format, input string, opt Options) (*memStore, ImportStats) {
	t.Helper()
	rd, err := NewReader(strings.NewReader(input), f, opt)
	if err != nil {
		t.Fatal(err)
	}
	m := newMem()
	st, err := Import(context.Background(), rd, m, nil)
	if err != nil {
		t.Fatalf("import %s: %v", f, err)
	}
	return m, st
}

const influxInspectOutput = `# INFLUXDB EXPORT: 1677-09-21T00:12:43Z - 2262-04-11T23:47:16Z
# DDL
CREATE DATABASE src WITH NAME autogen
CREATE RETENTION POLICY "rp" ON "src" DURATION 0s REPLICATION 1
CREATE DATABASE other WITH NAME autogen
# DML
# CONTEXT-DATABASE:src
# CONTEXT-RETENTION-POLICY:autogen
# writing tsm data
cpu,host=a,region=eu\ west usage=1.5,procs=3i,state="ok, \"fine\"",up=true 1700000000000000000
cpu,host=a,region=eu\ west usage=2.5,procs=4i,state="ok",up=false 1700000001000000000
# writing wal data
cpu,host=b usage=-0.25 1700000000500000000
# CONTEXT-DATABASE:other
# CONTEXT-RETENTION-POLICY:autogen
m\,x,t\=k=v\ w f=7i 1700000000000000123
`

// TestLPNamesSeriesAsWrite checks that influx_inspect's output imports as /write of the
// same lines with each context's db would store them.
func TestLPNamesSeriesAsWrite(t *testing.T) {
	m, st := importAll(t, LP, influxInspectOutput, Options{})
	if st.Points != 10 || st.Lines != 16 {
		t.Errorf("imported %d points from %d lines, want 10 from 16", st.Points, st.Lines)
	}
	want := newMem()
	for _, part := range []struct{ db, body string }{
		{"src", "cpu,host=a,region=eu\\ west usage=1.5,procs=3i,state=\"ok, \\\"fine\\\"\",up=true 1700000000000000000\n" +
			"cpu,host=a,region=eu\\ west usage=2.5,procs=4i,state=\"ok\",up=false 1700000001000000000\n" +
			"cpu,host=b usage=-0.25 1700000000500000000\n"},
		{"other", "m\\,x,t\\=k=v\\ w f=7i 1700000000000000123\n"},
	} {
		ws, _, dropped, reason := httpapi.ParseLineProtocol([]byte(part.body), part.db, 1, nilTime)
		if dropped > 0 {
			t.Fatal(reason)
		}
		want.Write(context.Background(), ws)
	}
	if !reflect.DeepEqual(m.sorted(), want.sorted()) || !reflect.DeepEqual(m.tags, want.tags) {
		t.Errorf("imported %v %v\nwant %v %v", m.sorted(), m.tags, want.sorted(), want.tags)
	}
	if _, ok := m.pts[`src/cpu,host=a,region=eu\ west#state`]; !ok {
		t.Errorf("keys: %v", keys(m))
	}
}

func keys(m *memStore) []string {
	var out []string
	for k := range m.pts {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestRoundTrip exports every format and imports it back: equal keys, types, points
// and (lp, jsonl) tags, whatever the window planning cut.
func TestRoundTrip(t *testing.T) {
	defer func(n int64) { readPoints = n }(readPoints)
	readPoints = 500
	src := newMem()
	var body strings.Builder
	for i := int64(0); i < 3*readPoints; i++ {
		// a dense quarter of an hour (more than readPoints points in one planning
		// window), then sparse
		t := int64(1700000000e9) + i*int64(10e6)
		if i > readPoints*2 {
			t += int64(i) * 3600e9 / 7
		}
		fmt.Fprintf(&body, "m,host=a v=%v,n=%di,s=\"q,\\\"x%d\" %d\n", float64(i)/3, i, i%5, t)
	}
	ws, _, dropped, reason := httpapi.ParseLineProtocol([]byte(body.String()), "db", 1, nilTime)
	if dropped > 0 {
		t.Fatal(reason)
	}
	src.Write(context.Background(), ws)
	src.Write(context.Background(), []Write{{Key: `up{job="x"}`, Tags: map[string]string{"__name__": "up", "job": "x"}, Pts: floats(1700000000e9, 1, 0.5)}})
	src.Write(context.Background(), []Write{{Key: "pmu1/freq", Pts: floats(1700000000e9, 50.01, math.NaN())}})
	for _, f := range []Format{LP, CSV, JSONL} {
		ss := src.series()
		if f == LP {
			ss = ss[:3] // db/m… only: the others were not written as line protocol
		}
		var out bytes.Buffer
		w, _ := NewWriter(&out, f, Options{TimeUnit: 1})
		src.reads, src.most = 0, 0
		st, err := Export(context.Background(), src, ss, math.MinInt64, math.MaxInt64, w, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if int64(src.most) > readPoints || src.reads < 3 {
			t.Errorf("%s: %d reads, at most %d points: not bounded by %d", f, src.reads, src.most, readPoints)
		}
		dst, ist := importAll(t, f, out.String(), Options{TimeUnit: 1})
		if ist.Points != st.Points {
			t.Errorf("%s: exported %d points, imported %d", f, st.Points, ist.Points)
		}
		want := src.sorted()
		if f == LP {
			delete(want, `up{job="x"}`)
			delete(want, "pmu1/freq")
		}
		got := dst.sorted()
		if len(got) != len(want) {
			t.Fatalf("%s: keys %v, want %d series", f, keys(dst), len(want))
		}
		for k, p := range want {
			if !samePoints(p, got[k]) {
				t.Errorf("%s: series %q differs after the round trip", f, k)
			}
			if f != CSV && !reflect.DeepEqual(src.tags[k], dst.tags[k]) {
				t.Errorf("%s: series %q tags %v, want %v", f, k, dst.tags[k], src.tags[k])
			}
		}
	}
}

var nilTime = time.Unix(0, 0)

func floats(t0 int64, vs ...float64) series.Points {
	var p series.Points
	for i, v := range vs {
		p.AppendFloat(t0+int64(i)*1e9, v)
	}
	return p
}

func samePoints(a, b series.Points) bool {
	if a.Type != b.Type || !reflect.DeepEqual(a.T, b.T) || !reflect.DeepEqual(a.I, b.I) || !reflect.DeepEqual(a.S, b.S) || len(a.F) != len(b.F) {
		return false
	}
	for i := range a.F {
		if a.F[i] != b.F[i] && !(math.IsNaN(a.F[i]) && math.IsNaN(b.F[i])) {
			return false
		}
	}
	return true
}

// TestImportNamesTheBadLine checks that every format's refusal names the line, and
// that what came before it was stored.
func TestImportNamesTheBadLine(t *testing.T) {
	for _, c := range []struct {
		f     Format
		in    string
		line  string
		count int64
	}{
		{LP, "# DML\n# CONTEXT-DATABASE: d\nm v=1 1\n\n# comment\nm v=2 2\nm v= 3\n", "line 7:", 0},
		{LP, "m v=1 1\n", "line 1: no database", 0},
		{CSV, "key,type,time,value\na,float,1,1\na,float,2,x\n", "line 3:", 0},
		{CSV, "a,float,1,1\nb,int,2\n", "line 2: want 4 fields", 0},
		{JSONL, `{"metric":{"__name__":"a"},"values":[1],"timestamps":[1]}` + "\n" + `{"metric":{"__name__":"a"},"values":[1,2],"timestamps":[1]}` + "\n", "line 2: 2 values but 1 timestamps", 0},
		{JSONL, "{\"metric\":{}}\n", "line 1: no \"key\"", 0},
		{JSONL, "not json\n", "line 1: not a JSON object", 0},
	} {
		rd, _ := NewReader(strings.NewReader(c.in), c.f, Options{})
		_, err := Import(context.Background(), rd, newMem(), nil)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.line) {
			t.Errorf("%s %q: error %v, want an *InputError naming %q", c.f, c.in, err, c.line)
		}
	}
	// A line past MaxLineBytes is refused by number, not read whole.
	long := "a,float,1,1\n" + "m v=1 " + strings.Repeat("1", MaxLineBytes) + "\n"
	rd, _ := NewReader(strings.NewReader(long), LP, Options{DB: "d"})
	if _, err := Import(context.Background(), rd, newMem(), nil); err == nil || !strings.Contains(err.Error(), "line 2: longer than") {
		t.Errorf("long line: %v", err)
	}
}

// TestJSONLFromVictoriaMetrics reads lines as VictoriaMetrics' /api/v1/export writes
// them: no key or type; series named as remote write names them, values floats.
func TestJSONLFromVictoriaMetrics(t *testing.T) {
	in := `{"metric":{"__name__":"up","job":"node","instance":"a:9100"},"values":[1,1,0],"timestamps":[1700000000000,1700000015000,1700000030000]}
{"metric":{"__name__":"cpu_usage","host":"h"},"values":[0.5],"timestamps":[1700000000000]}
`
	m, st := importAll(t, JSONL, in, Options{})
	if st.Points != 4 {
		t.Errorf("imported %d points, want 4", st.Points)
	}
	key := `up{instance="a:9100",job="node"}`
	p := m.pts[key]
	if p == nil || p.Type != series.Float || p.T[1] != 1700000015000e6 || m.tags[key]["job"] != "node" || m.tags[key]["__name__"] != "up" {
		t.Errorf("keys %v; %q: %+v tags %v", keys(m), key, p, m.tags[key])
	}
}

func TestParseSelector(t *testing.T) {
	for in, want := range map[string]string{
		`up`:                      "__name__=up",
		`up{job="a"}`:             "__name__=up,job=a",
		`{job="a", host="b\"c"}`:  `job=a,host=b"c`,
		` cpu_usage { host="h" }`: "__name__=cpu_usage,host=h",
	} {
		tags, err := parseSelector(in)
		if err != nil || catalog.FormatTags(tags) != want {
			t.Errorf("parseSelector(%q) = %v, %v; want %s", in, tags, err, want)
		}
	}
	for _, bad := range []string{`{job=~"a"}`, `{job!="a"}`, `{}`, `up{job="a"`, `{job=a}`} {
		if _, err := parseSelector(bad); err == nil {
			t.Errorf("parseSelector(%q) accepted", bad)
		}
	}
	alts := nameAlternatives([]catalog.Tag{{K: "__name__", V: "cpu_usage_idle"}})
	if len(alts) != 3 || catalog.FormatTags(alts[1]) != "__measurement=cpu,__field=usage_idle" {
		t.Errorf("nameAlternatives: %v", alts)
	}
}

// FuzzReader feeds every format arbitrary input: the reader returns batches or an
// error, never panics, and a batch holds valid keys.
func FuzzReader(f *testing.F) {
	f.Add([]byte(influxInspectOutput), uint8(0))
	f.Add([]byte("key,type,time,value\na,int,1,2\n"), uint8(1))
	f.Add([]byte(`{"metric":{"__name__":"a"},"values":[1,"x"],"timestamps":[1,2],"type":"string"}`), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, which uint8) {
		fm := []Format{LP, CSV, JSONL}[which%3]
		rd, _ := NewReader(bytes.NewReader(in), fm, Options{DB: "d"})
		for i := 0; i < 100; i++ {
			ws, err := rd.Next()
			if err == io.EOF || err != nil {
				return
			}
			for _, w := range ws {
				if err := series.ValidateKey(w.Key); err != nil {
					t.Fatalf("%s: batch with key %q: %v", fm, w.Key, err)
				}
			}
		}
	})
}

// TestLPDefaultDB checks --db: the database of lines before any # CONTEXT-DATABASE
// line, which then takes over.
func TestLPDefaultDB(t *testing.T) {
	m, _ := importAll(t, LP, "m v=1 1\n# CONTEXT-DATABASE: other\nm v=2 2\n", Options{DB: "first"})
	if got := keys(m); !reflect.DeepEqual(got, []string{"first/m#v", "other/m#v"}) {
		t.Errorf("keys %v", got)
	}
}

// TestBoundedRefusesPastTheLimit holds MaxRequests requests and checks the next is 429.
func TestBoundedRefusesPastTheLimit(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, MaxRequests)
	h := bounded(MaxRequests, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})
	done := make(chan struct{})
	for i := 0; i < MaxRequests; i++ {
		go func() {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/v1/export", nil))
			done <- struct{}{}
		}()
		<-entered
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/export", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("request past the limit: %d %v", rec.Code, rec.Header())
	}
	close(release)
	for i := 0; i < MaxRequests; i++ {
		<-done
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/export", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("after the others ended: %d", rec.Code)
	}
}

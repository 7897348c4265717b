package httpapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// SELECT … INTO: what it writes is read back; a field type conflict with what the
// target holds fails the statement, naming the field, and stores none of the
// conflict; an answer past MaxQueryPoints fails before anything is written.
func TestSelectInto(t *testing.T) {
	const db = "intotest"
	t0 := time.Date(2016, 4, 1, 0, 0, 0, 0, time.UTC)
	var lines []string
	for i := range 60 {
		for _, h := range []string{"a", "b"} {
			lines = append(lines, fmt.Sprintf("src,host=%s v=%d,s=\"x%d\" %d", h, i, i%3, ns(t0.Add(time.Duration(i)*time.Minute))))
		}
	}
	lines = append(lines, fmt.Sprintf("typed,host=a mx=\"text\" %d", ns(t0)))
	if code, b := write(t, db, "", strings.Join(lines, "\n")); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", rfc(t0), rfc(t0.Add(time.Hour)))

	code, r := query(t, db, "SELECT max(v) AS mx, count(s) INTO dst FROM src WHERE "+rng+" GROUP BY time(10m), host")
	if code != http.StatusOK || len(r.Results) != 1 || r.Results[0].Error != "" || len(r.Results[0].Series) != 1 {
		t.Fatalf("INTO: %d %+v", code, r)
	}
	if s := r.Results[0].Series[0]; s.Name != "result" || fmt.Sprint(s.Columns) != "[time written]" || fmt.Sprint(s.Values) != "[[1970-01-01T00:00:00Z 12]]" {
		t.Errorf("INTO answered %+v, want 12 written", s)
	}
	code, r = query(t, db, "SELECT mx, count FROM dst WHERE host = 'b' AND "+rng)
	if code != http.StatusOK || len(r.Results[0].Series) != 1 {
		t.Fatalf("reading back: %d %+v", code, r)
	}
	got := r.Results[0].Series[0].Values
	if len(got) != 6 || fmt.Sprint(got[0]) != "[2016-04-01T00:00:00Z 9 10]" || fmt.Sprint(got[5]) != "[2016-04-01T00:50:00Z 59 10]" {
		t.Errorf("read back %v, want 6 windows of max and count", got)
	}

	// typed holds mx as a string: a float mx conflicts.
	code, r = query(t, db, "SELECT max(v) AS mx INTO typed FROM src WHERE "+rng+" GROUP BY time(30m), host")
	if code != http.StatusOK || !strings.Contains(r.Results[0].Error, "field type conflict") || !strings.Contains(r.Results[0].Error, `"mx"`) {
		t.Errorf("INTO a conflicting field: %d %+v, want the conflict named", code, r)
	}
	if _, r = query(t, db, "SELECT count(mx) FROM typed"); fmt.Sprint(r.Results[0].Series[0].Values) != "[[1970-01-01T00:00:00Z 1]]" {
		t.Errorf("after the conflict typed holds %+v, want its one string", r.Results[0].Series)
	}

	// Past MaxQueryPoints: refused before writing.
	h, err := New(engine, Config{WorkBytesPerSecond: 1 << 30, ClientShare: 1, MaxQueryPoints: 50}, nil)
	if err != nil {
		t.Fatal(err)
	}
	small := httptest.NewServer(h)
	defer small.Close()
	code, r = queryAt(t, small.URL, db, "SELECT v INTO big FROM src WHERE "+rng)
	if code != http.StatusOK || !strings.Contains(r.Results[0].Error, "more than 50 points") {
		t.Errorf("INTO past MaxQueryPoints: %d %+v", code, r)
	}
	if _, r = query(t, db, "SELECT count(v) FROM big"); len(r.Results[0].Series) != 0 {
		t.Errorf("an INTO past MaxQueryPoints wrote %+v", r.Results[0].Series)
	}
}

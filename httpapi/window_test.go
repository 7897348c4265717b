package httpapi

import (
	"testing"
	"time"
)

// windowing cuts days at local midnight, 23 and 25 hours long across Berlin's
// daylight-saving changes, and shifts windows by an offset, negative too.
func TestWindowing(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	day := windowing{every: int64(24 * time.Hour), loc: berlin}
	for _, c := range []struct {
		at    string
		start string
		hours int
	}{
		{"2026-03-29T12:00:00+02:00", "2026-03-29T00:00:00+01:00", 23},
		{"2026-03-29T00:30:00+01:00", "2026-03-29T00:00:00+01:00", 23},
		{"2026-10-25T23:59:00+01:00", "2026-10-25T00:00:00+02:00", 25},
		{"2026-06-01T00:00:00+02:00", "2026-06-01T00:00:00+02:00", 24},
	} {
		at, _ := time.Parse(time.RFC3339, c.at)
		want, _ := time.Parse(time.RFC3339, c.start)
		s, e := day.window(at.UnixNano())
		if s != want.UnixNano() || time.Duration(e-s) != time.Duration(c.hours)*time.Hour {
			t.Errorf("window of %s: [%s, %s), want from %s, %d h", c.at, time.Unix(0, s).In(berlin), time.Unix(0, e).In(berlin), c.start, c.hours)
		}
	}
	tenMin := int64(10 * time.Minute)
	for _, c := range []struct{ offset, t, start int64 }{
		{int64(2 * time.Minute), int64(13 * time.Minute), int64(12 * time.Minute)},
		{int64(2 * time.Minute), int64(1 * time.Minute), -int64(8 * time.Minute)},
		{int64(8 * time.Minute), int64(7 * time.Minute), -int64(2 * time.Minute)}, // time(10m, -2m)
	} {
		w := windowing{every: tenMin, offset: c.offset}
		if s, e := w.window(c.t); s != c.start || e != c.start+tenMin {
			t.Errorf("offset %v: window of %v is [%v, %v), want from %v", time.Duration(c.offset), time.Duration(c.t), time.Duration(s), time.Duration(e), time.Duration(c.start))
		}
	}
	if (windowing{every: tenMin}).aligned() != true || (windowing{every: tenMin, offset: 1}).aligned() || (windowing{every: tenMin, loc: berlin}).aligned() {
		t.Error("aligned: only windows of multiples of every since the epoch")
	}
}

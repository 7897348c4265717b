package uplink

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxCursorWindows bounds the late-check windows a cursor record carries, so that it
// stays a short string value (series.MaxStringValueLen).
const maxCursorWindows = 64

// cursorRecord is what a forwarder keeps in the DHT per (uplink, series): the time up
// to which the series was forwarded and acknowledged, and, for the late check, the
// points forwarded per window since From (a window of [From, Cursor) that it does not
// list had none). A new forwarder resumes from it: only points that arrive after it
// was saved count as late.
type cursorRecord struct {
	Cursor int64
	From   int64
	Counts map[int64]int64
}

// encode writes "1 <cursor> <from> <start>:<count> …", windows ascending; only the
// newest maxCursorWindows windows are kept (From moves up accordingly).
func (r cursorRecord) encode(width int64) string {
	starts := make([]int64, 0, len(r.Counts))
	for w := range r.Counts {
		if w >= r.From {
			starts = append(starts, w)
		}
	}
	slices.Sort(starts)
	from := r.From
	if len(starts) > maxCursorWindows {
		starts = starts[len(starts)-maxCursorWindows:]
		from = starts[0]
	}
	if lo := r.Cursor - maxCursorWindows*width; from < lo {
		from = lo - lo%width
		for len(starts) > 0 && starts[0] < from {
			starts = starts[1:]
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "1 %d %d", r.Cursor, from)
	for _, w := range starts {
		fmt.Fprintf(&b, " %d:%d", w, r.Counts[w])
	}
	return b.String()
}

// decodeCursor reads what encode wrote, refusing anything else.
func decodeCursor(s string) (cursorRecord, error) {
	f := strings.Fields(s)
	if len(f) < 3 || f[0] != "1" {
		return cursorRecord{}, fmt.Errorf("cursor record %.40q: not version 1", s)
	}
	if len(f) > 3+maxCursorWindows {
		return cursorRecord{}, fmt.Errorf("cursor record: %d windows, at most %d", len(f)-3, maxCursorWindows)
	}
	var r cursorRecord
	var err1, err2 error
	r.Cursor, err1 = strconv.ParseInt(f[1], 10, 64)
	r.From, err2 = strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return cursorRecord{}, fmt.Errorf("cursor record %.40q: bad cursor or start", s)
	}
	r.Counts = make(map[int64]int64, len(f)-3)
	for _, p := range f[3:] {
		ws, cs, ok := strings.Cut(p, ":")
		w, err1 := strconv.ParseInt(ws, 10, 64)
		c, err2 := strconv.ParseInt(cs, 10, 64)
		if !ok || err1 != nil || err2 != nil || c < 0 || w < r.From {
			return cursorRecord{}, fmt.Errorf("cursor record: bad window %.40q", p)
		}
		r.Counts[w] = c
	}
	return r, nil
}

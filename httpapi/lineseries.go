package httpapi

import "time"

// ParseLineProtocol parses a body of line protocol as /write does for database db,
// with timestamps in units of prec nanoseconds (1: ns) and now for lines without one:
// one SeriesWrite per series, named and tagged exactly as /write names and tags it
// (LineKey, with __db, __measurement and __field). A line that does not parse, or
// whose field's type conflicts with an earlier line of the body, is dropped and
// counted; reason describes the first one. tsdht import reads line protocol files
// through it, so that a file and a /write of the same lines make the same series.
func ParseLineProtocol(body []byte, db string, prec int64, now time.Time) (ws []SeriesWrite, parsed, dropped int, reason string) {
	batches, parsed, dropped, reason := parseLines(body, db, prec, now)
	ws = make([]SeriesWrite, len(batches))
	for i, b := range batches {
		ws[i] = SeriesWrite{Key: b.key, Tags: b.tags, Pts: b.pts}
	}
	return ws, parsed, dropped, reason
}

// LabelsKey returns the series key Prometheus remote write gives a series of these
// labels (its name in __name__): PromKey's `name{l1="v1",…}`.
func LabelsKey(labels map[string]string) string {
	ls := make([]tagPair, 0, len(labels))
	for k, v := range labels {
		ls = append(ls, tagPair{k, v})
	}
	sortTags(ls) // map keys are unique: no error
	return PromKey(labels["__name__"], ls)
}

package httpapi

import "github.com/tsdht/tsdht/tsdb/series"

// keepPoints returns the points of pts whose keep is true (keep has pts' length):
// pts itself when every point is kept, else a copy of exactly the kept points, the
// columns sized once. It never changes pts, which the executor may hold elsewhere
// (a series both selected and named by the WHERE clause).
func keepPoints(pts series.Points, keep []bool) series.Points {
	n := 0
	for _, k := range keep {
		if k {
			n++
		}
	}
	if n == len(keep) {
		return pts
	}
	out := series.Points{Type: pts.Type}
	if n == 0 {
		return out
	}
	out.T = make([]int64, 0, n)
	for i, k := range keep {
		if k {
			out.T = append(out.T, pts.T[i])
		}
	}
	switch pts.Type {
	case series.Float:
		out.F = keepColumn(pts.F, keep, n)
	case series.Int:
		out.I = keepColumn(pts.I, keep, n)
	case series.String:
		out.S = keepColumn(pts.S, keep, n)
	}
	return out
}

// keepColumn copies the n values of col whose keep is true.
func keepColumn[V any](col []V, keep []bool, n int) []V {
	out := make([]V, 0, n)
	for i, k := range keep {
		if k {
			out = append(out, col[i])
		}
	}
	return out
}

package httpapi

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
)

// TestKeepPointsKeepsWhatAppendFromWould checks keepPoints against the point-by-point
// copy it replaces, for every value type and for all, none and some points kept, and
// that it leaves its input alone.
func TestKeepPointsKeepsWhatAppendFromWould(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []series.Type{series.Float, series.Int, series.String} {
		for _, share := range []int{0, 1, 2, 4} { // 0: none kept, 1: all kept
			pts := series.Points{}
			for i := range 50 {
				switch typ {
				case series.Float:
					pts.AppendFloat(int64(i), r.Float64())
				case series.Int:
					pts.AppendInt(int64(i), r.Int64())
				case series.String:
					pts.AppendString(int64(i), string(rune('a'+r.IntN(26))))
				}
			}
			orig := series.Points{Type: pts.Type, T: slices.Clone(pts.T), F: slices.Clone(pts.F), I: slices.Clone(pts.I), S: slices.Clone(pts.S)}
			keep := make([]bool, pts.Len())
			want := series.Points{Type: pts.Type}
			for i := range keep {
				keep[i] = share == 1 || (share > 1 && r.IntN(share) == 0)
				if keep[i] {
					want.AppendFrom(&pts, i)
				}
			}
			got := keepPoints(pts, keep)
			if got.Type != want.Type || !slices.Equal(got.T, want.T) || !slices.Equal(got.F, want.F) ||
				!slices.Equal(got.I, want.I) || !slices.Equal(got.S, want.S) {
				t.Errorf("%s, 1 in %d kept: got %+v, want %+v", typ, share, got, want)
			}
			if err := got.Valid(); err != nil {
				t.Errorf("%s, 1 in %d kept: %v", typ, share, err)
			}
			if !slices.Equal(pts.T, orig.T) || !slices.Equal(pts.F, orig.F) || !slices.Equal(pts.I, orig.I) || !slices.Equal(pts.S, orig.S) {
				t.Errorf("%s, 1 in %d kept: the input changed", typ, share)
			}
		}
	}
}

package ingest

// gapTracker follows a stream's frame indexes (the frame's time × DATA_RATE) to count
// frames that never came, frames that came late (out of order) and duplicates —
// UDP's ways — without storing anything but a window of the newest 64 frames.
type gapTracker struct {
	rate    int16 // DATA_RATE: > 0 frames per second, < 0 seconds per frame, 0 untracked
	started bool
	first   int64  // first frame index seen
	newest  int64  // newest frame index seen
	seen    uint64 // bit i: frame newest−i arrived
}

// index returns the frame index of a frame at soc + fracNs nanoseconds.
func (g *gapTracker) index(soc uint32, fracNs int64) int64 {
	if g.rate > 0 {
		return int64(soc)*int64(g.rate) + (fracNs*int64(g.rate)+500_000_000)/1_000_000_000
	}
	return int64(soc) / int64(-g.rate)
}

// add records a frame. missed is the change in the count of frames not (yet) seen: a
// jump over n frames adds n, a late frame filling one of them takes one back; late says
// the frame is older than the newest; dup that it was seen already (within the window).
func (g *gapTracker) add(soc uint32, fracNs int64) (missed int64, late, dup bool) {
	if g.rate == 0 {
		return 0, false, false
	}
	k := g.index(soc, fracNs)
	if !g.started {
		g.started, g.first, g.newest, g.seen = true, k, k, 1
		return 0, false, false
	}
	switch d := k - g.newest; {
	case d > 0:
		missed = d - 1
		if d >= 64 {
			g.seen = 0
		} else {
			g.seen <<= uint(d)
		}
		g.seen |= 1
		g.newest = k
	case d == 0:
		return 0, false, true
	case d > -64:
		bit := uint64(1) << uint(-d)
		if g.seen&bit != 0 {
			return 0, true, true
		}
		g.seen |= bit
		if k > g.first {
			missed = -1
		}
		late = true
	default:
		late = true // older than the window: cannot say whether it is a duplicate
	}
	return missed, late, dup
}

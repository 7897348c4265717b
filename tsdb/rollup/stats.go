package rollup

// Stats counts a node's use of rollups: Hits and Misses as a coordinator (Client), the
// rest as a home (Homes).
type Stats struct {
	Hits    int64 // rollup windows (of any level) answered from the homes
	Misses  int64 // rollup windows the homes could not vouch for and no finer level covered: aggregated from raw shards
	Pulls   int64 // pull rounds this node ran as a home
	Pulled  int64 // finest windows those rounds asked the raw replicas for
	Series  int   // series this node keeps rollups of
	Dropped int64 // series this node stopped keeping: no longer one of their homes
}

// Plus returns the sum of s and o: a node's coordinator and home counters together.
func (s Stats) Plus(o Stats) Stats {
	return Stats{Hits: s.Hits + o.Hits, Misses: s.Misses + o.Misses, Pulls: s.Pulls + o.Pulls, Pulled: s.Pulled + o.Pulled,
		Series: s.Series + o.Series, Dropped: s.Dropped + o.Dropped}
}

package coord

// A thin client's read (wire.GetReq.Parts) gets each shard's points as the replica
// packed them, forwarded by the coordinator, wherever the coordinator has nothing to
// merge: the common case of replicas that agree. The coordinator still decodes every
// answer it forwards (the remote replica's Read: an answer that does not decode counts as no
// answer, and the others stand in), but it no longer joins the points into one answer
// and packs them again, which for a 150 s read of 60 Hz history was 9,000 points
// copied and packed on the one node every read waits for.

// forwardable returns the packed answer of a shard, and its number of points, when it
// is the shard's whole answer as it stands: exactly one replica sent the points, in
// a packed form the asker decodes (version at most v), and every replica that answered
// holds the same points by count and digest (so nothing is merged and nothing
// repaired) and no tombstones (so nothing is dropped). ok is false otherwise: the
// caller merges the answers and packs the result itself.
func forwardable(ans []replicaAnswer, v int) (packed []byte, n int, ok bool) {
	var data *replicaAnswer
	for j := range ans {
		a := &ans[j]
		if !a.ok {
			continue
		}
		if len(a.res.Deleted) > 0 {
			return nil, 0, false
		}
		if a.isData {
			if data != nil {
				return nil, 0, false
			}
			data = a
		}
	}
	// The version byte leads a packed answer (series.AppendPackedFor).
	if data == nil || !data.res.Held || len(data.res.Packed) == 0 || int(data.res.Packed[0]) > v {
		return nil, 0, false
	}
	if data.res.Points.Len() != data.res.Count { // what the coordinator decoded (the remote replica's Read)
		return nil, 0, false
	}
	for j := range ans {
		if a := &ans[j]; a.ok && (!a.res.Held || a.res.Count != data.res.Count || a.res.Hash != data.res.Hash) {
			return nil, 0, false
		}
	}
	return data.res.Packed, data.res.Count, true
}

package cluster

import (
	"encoding/binary"
	"math"

	"github.com/cespare/xxhash/v2"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// StatsDigest is the digest replicas compare a pair by: its count and point-set hash.
func StatsDigest(count int64, hash uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], uint64(count))
	binary.LittleEndian.PutUint64(b[8:], hash)
	return xxhash.Sum64(b[:])
}

// Summarizer is a store that can describe a pair without reading it.
type Summarizer interface {
	Summary(ref store.ShardRef, key string) (store.Summary, bool, error)
}

// ReadDigest is the digest a read compares replicas by. For a whole quantum it is the
// pair's summary — count and first and last timestamp — which a replica answers without
// reading a point: missing points (a new owner, a lost write) show in it. A value
// overwritten on one replica only does not; the repairer's strong digests (digest) catch
// that. A partial quantum is read anyway, so it gets the strong digest.
func ReadDigest(p *series.Points, whole bool) uint64 {
	if !whole {
		return Digest(p)
	}
	if p.Len() == 0 {
		return SummaryHash(0, 0, 0)
	}
	return SummaryHash(int64(p.Len()), p.T[0], p.T[p.Len()-1])
}

func SummaryHash(count, minT, maxT int64) uint64 {
	if count == 0 {
		minT, maxT = 0, 0
	}
	var b [24]byte
	binary.LittleEndian.PutUint64(b[:], uint64(count))
	binary.LittleEndian.PutUint64(b[8:], uint64(minT))
	binary.LittleEndian.PutUint64(b[16:], uint64(maxT))
	return xxhash.Sum64(b[:])
}

// PairSetHash returns the statistics of all of a pair's points with their set hash
// (agg.Partial.Hash): from the store's statistics when it keeps them (no point read),
// else computed from the points.
func PairSetHash(st store.Store, ref store.ShardRef, key string) (agg.Partial, bool, error) {
	if a, ok := st.(store.Analyzer); ok {
		return a.PairStats(ref, key)
	}
	pts, held, err := st.Read(ref, key, math.MinInt64, math.MaxInt64)
	if err != nil || !held {
		return agg.Partial{}, held, err
	}
	n := pts.Len()
	return agg.WithHash(agg.FromPoints(&pts, 0, n), &pts, 0, n), true, nil
}

// Digest hashes a replica's answer for one shard so that replicas can be compared
// without shipping their points: equal digests mean equal data.
func Digest(p *series.Points) uint64 {
	h := xxhash.New()
	var b [16]byte
	for i := range p.T {
		binary.LittleEndian.PutUint64(b[:8], uint64(p.T[i]))
		switch p.Type {
		case series.Float:
			binary.LittleEndian.PutUint64(b[8:], math.Float64bits(p.F[i]))
			h.Write(b[:])
		case series.Int:
			binary.LittleEndian.PutUint64(b[8:], uint64(p.I[i]))
			h.Write(b[:])
		case series.String:
			h.Write(b[:8])
			h.WriteString(p.S[i])
			h.Write([]byte{0})
		}
	}
	return h.Sum64()
}

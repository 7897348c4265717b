// Package clustertest holds what tests of the roles over package cluster (the
// coordinator, the repairer) build clusters of without gossip: a placement pinned to
// fixed owners and replicas looked up in a map.
package clustertest

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/series"
)

// FixedPlacement is a cluster.Placement whose every ID is owned by Owners, closest
// first; Me is this node.
type FixedPlacement struct {
	Me     dht.Peer
	Owners []dht.Peer
}

var _ cluster.Placement = (*FixedPlacement)(nil)

func (f *FixedPlacement) Self() dht.Peer { return f.Me }

// Locate returns the first rf of Owners.
func (f *FixedPlacement) Locate(_ context.Context, _ quanta.ID, rf int) ([]dht.Peer, error) {
	return f.Owners[:min(rf, len(f.Owners))], nil
}
func (f *FixedPlacement) Live() []dht.Peer           { return append([]dht.Peer{f.Me}, f.Owners...) }
func (f *FixedPlacement) Version() uint64            { return 1 }
func (f *FixedPlacement) Subscribe() <-chan struct{} { return nil }

// ReplicaMap is a cluster.Replicas that resolves peers by ID to replicas a test built;
// it has no Local, so even this node's replica is asked as any other.
type ReplicaMap map[string]cluster.Replica

func (m ReplicaMap) For(p dht.Peer) cluster.Replica { return m[p.ID] }
func (m ReplicaMap) Local() cluster.Local           { return nil }

// Base is a timestamp 3.3 s into a 10 s quantum, an hour ago.
func Base() int64 {
	return (time.Now().Add(-time.Hour).Unix()/10)*10*int64(time.Second) + 3_300_000_000
}

// SixtyHz returns n float points at 60 Hz from t0.
func SixtyHz(t0 int64, n int) series.Points {
	var p series.Points
	for i := 0; i < n; i++ {
		p.AppendFloat(t0+int64(i)*int64(time.Second)/60, float64(i)+0.25)
	}
	return p
}

// RequireSame fails t unless got holds exactly the points of want.
func RequireSame(t testing.TB, want, got series.Points) {
	t.Helper()
	if want.Len() != got.Len() {
		t.Fatalf("got %d points, want %d", got.Len(), want.Len())
	}
	for i := range want.T {
		if want.T[i] != got.T[i] || !want.Equal(i, &got, i) {
			t.Fatalf("point %d: got %d=%s, want %d=%s", i, got.T[i], got.Value(i), want.T[i], want.Value(i))
		}
	}
}

// Code returns the rpc.RemoteError code of err, or "".
func Code(err error) string {
	var re *rpc.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

// Float32Readings returns n points at 60 Hz whose values are float32 readings, as a
// C37.118 PMU in floating-point format sends them: no decimal scale fits them.
func Float32Readings(t0 int64, n int) series.Points {
	var p series.Points
	for i := 0; i < n; i++ {
		v := math.Mod(0.5*float64(i)/60+0.01*math.Sin(float64(i)*1.7), 360) - 180
		p.AppendFloat(t0+int64(i)*1e9/60+int64(i*7919%2000), float64(float32(v)))
	}
	return p
}

// Package pmuplay is the simple 60 Hz phasor measurement unit that tsdht demo and
// tsdht-bench play into a cluster, and the exact check of what a read returns. Its
// values are cheap to generate and deterministic for a seed; internal/pmudata models
// real PMU data more closely.
package pmuplay

import (
	"fmt"
	"math"
	"math/rand"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Channels are the series a PMU writes, named under its Name.
var Channels = []string{"freq", "vmag", "vang", "iang"}

// PMU plays a 60 Hz phasor measurement unit: frequency near 60 Hz with small noise, a
// voltage magnitude with noise in the fifth significant digit, slowly drifting angles.
type PMU struct {
	Name string
	Rnd  *rand.Rand
	T0   int64 // ns of the first sample
}

// Samples returns n samples of every channel, 60 a second from T0.
func (p *PMU) Samples(n int) map[string]series.Points {
	out := make(map[string]series.Points, len(Channels))
	period := int64(time.Second) / 60
	for i := 0; i < n; i++ {
		t := p.T0 + int64(i)*period + p.Rnd.Int63n(2000) // a few µs of timestamp jitter
		sec := float64(i) / 60
		add := func(ch string, v float64) {
			pts := out[ch]
			pts.AppendFloat(t, v)
			out[ch] = pts
		}
		add("freq", 60+0.002*p.Rnd.NormFloat64())
		add("vmag", 1.0+0.00002*p.Rnd.NormFloat64())
		add("vang", math.Mod(0.5*sec+0.01*p.Rnd.NormFloat64(), 360)-180)
		add("iang", math.Mod(0.5*sec-30+0.02*p.Rnd.NormFloat64(), 360)-180)
	}
	return out
}

// Key returns the series key of channel ch.
func (p *PMU) Key(ch string) string { return p.Name + "/" + ch }

// SamePoints says where got differs from want, timestamp and value, or returns nil.
func SamePoints(want, got *series.Points) error {
	if want.Len() != got.Len() {
		return fmt.Errorf("got %d points, want %d", got.Len(), want.Len())
	}
	for i := range want.T {
		if want.T[i] != got.T[i] || !want.Equal(i, got, i) {
			return fmt.Errorf("point %d: got %d,%s want %d,%s", i, got.T[i], got.Value(i), want.T[i], want.Value(i))
		}
	}
	return nil
}

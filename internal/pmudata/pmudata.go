// Package pmudata generates realistic, deterministic phasor-measurement-unit data for
// tests and benchmarks: what a node receives from PMUs speaking IEEE C37.118 in its
// floating-point format, so every value is a float32 widened to float64.
//
// The model, per frame (Rate frames a second, all PMUs stamped from GPS on the same
// instants, µs resolution as C37.118's TIME_BASE 10⁶ gives them):
//
//   - system frequency: a smoothed Ornstein–Uhlenbeck process around the nominal
//     60 Hz (σ 10 mHz, time constant 30 s, seen through a 2 s low-pass), plus per PMU a 0.25 Hz inter-area swing of
//     1–3 mHz; each PMU reports it with white measurement noise (Config.FreqNoise,
//     0.2 mHz ≈ 50 float32 ulps at 60 Hz);
//   - voltage angle (radians): the integral of the frequency error, plus a static bus
//     angle per PMU, plus noise (Config.AngleNoise, 20 µrad), wrapped to [−π, π): it
//     drifts smoothly and wraps about every 100 s;
//   - voltage magnitude (volts, 7.2 kV nominal ± 2 % per bus): a slow load drift
//     (σ 0.3 %, 120 s) plus noise (Config.MagNoise, 0.05 V ≈ 100 ulps);
//   - current angle: the voltage angle minus a power-factor angle of 0.2–0.5 rad
//     that drifts slowly, plus noise (Config.CurrentAngleNoise, 100 µrad), wrapped.
//
// The noise figures are those of a good P-class PMU in steady state; Config.NoiseScale
// multiplies them all, for sensitivity studies. One frame in 10⁴ is lost (a gap in
// every channel of that PMU), as on a real network. The same Config always yields the
// same points, bit for bit, on every platform: the generator uses math/rand/v2's PCG
// and plain float64 arithmetic.
package pmudata

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Config describes a data set. The zero value of each field takes its default
// (Default's value); NoiseScale 0 means 1.
type Config struct {
	// PMUs is the number of stations. Default 6.
	PMUs int
	// Rate is frames per second. Default 60.
	Rate int
	// Duration is how much time the data covers. Default one hour.
	Duration time.Duration
	// Start is the first frame's second; the zero value means 2026-01-01T00:00:00Z.
	Start time.Time
	// Seed selects the random streams. Default 1.
	Seed uint64
	// Prefix is put before every series key (a station is "<Prefix>pmu<N>"). Default "".
	Prefix string
	// NoiseScale multiplies every measurement noise. Default 1.
	NoiseScale float64
}

// Measurement noise standard deviations at NoiseScale 1.
const (
	FreqNoise         = 0.2e-3 // Hz
	AngleNoise        = 20e-6  // rad
	MagNoise          = 0.05   // V
	CurrentAngleNoise = 100e-6 // rad
)

// ChannelsPerPMU is the number of series each PMU yields.
const ChannelsPerPMU = 4

// Default returns the configuration of the reference data set: 6 PMUs × 4 channels at
// 60 Hz for one hour, 5,184,000 points.
func Default() Config {
	return Config{PMUs: 6, Rate: 60, Duration: time.Hour, Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Seed: 1, NoiseScale: 1}
}

func (c Config) withDefaults() Config {
	d := Default()
	if c.PMUs <= 0 {
		c.PMUs = d.PMUs
	}
	if c.Rate <= 0 {
		c.Rate = d.Rate
	}
	if c.Duration <= 0 {
		c.Duration = d.Duration
	}
	if c.Start.IsZero() {
		c.Start = d.Start
	}
	if c.Seed == 0 {
		c.Seed = d.Seed
	}
	if c.NoiseScale == 0 {
		c.NoiseScale = d.NoiseScale
	}
	return c
}

// Channel is one series of a data set.
type Channel struct {
	Station string        // "<prefix>pmu<N>", N from 1
	Name    string        // "freq", "va/ang", "va/mag" or "ia/ang"
	Points  series.Points // float values, ascending timestamps
}

// Key is the series key as tsdht's PMU client names it: "<station>/<name>".
func (c Channel) Key() string { return c.Station + "/" + c.Name }

// Frames returns how many frames each PMU sends (before losses).
func (c Config) Frames() int {
	c = c.withDefaults()
	return int(c.Duration.Seconds() * float64(c.Rate))
}

// Generate returns the data set's channels, PMU by PMU, in the order freq, va/ang,
// va/mag, ia/ang.
func Generate(c Config) []Channel {
	c = c.withDefaults()
	frames := c.Frames()
	dt := 1 / float64(c.Rate)
	sys := rand.New(rand.NewPCG(c.Seed, 0))
	// The system frequency is common to every PMU.
	fsys := make([]float64, frames)
	var f smooth
	for k := range fsys {
		fsys[k] = 60 + f.next(sys, dt, 30, 0.010)
	}
	startNs := c.Start.UnixNano()
	stamp := func(k int) int64 {
		sec, frac := int64(k/c.Rate), int64(k%c.Rate)
		us := (frac*1_000_000 + int64(c.Rate)/2) / int64(c.Rate) // FRACSEC rounded to the µs
		return startNs + sec*1e9 + us*1000
	}
	out := make([]Channel, 0, c.PMUs*ChannelsPerPMU)
	for p := range c.PMUs {
		r := rand.New(rand.NewPCG(c.Seed, uint64(p)+1))
		station := fmt.Sprintf("%spmu%d", c.Prefix, p+1)
		chans := [ChannelsPerPMU]Channel{
			{Station: station, Name: "freq"}, {Station: station, Name: "va/ang"},
			{Station: station, Name: "va/mag"}, {Station: station, Name: "ia/ang"},
		}
		for i := range chans {
			chans[i].Points = series.Points{Type: series.Float, T: make([]int64, 0, frames), F: make([]float64, 0, frames)}
		}
		swingAmp := 1e-3 + 2e-3*r.Float64()
		swingPhase := 2 * math.Pi * r.Float64()
		angle := (r.Float64()*2 - 1) * 0.5 // bus angle, rad
		v0 := 7200 * (1 + 0.02*(r.Float64()*2-1))
		var drift, pfDrift smooth // relative magnitude drift, power factor angle drift
		pf := 0.2 + 0.3*r.Float64()
		ns := c.NoiseScale
		for k := range frames {
			t := float64(k) * dt
			ftrue := fsys[k] + swingAmp*math.Sin(2*math.Pi*0.25*t+swingPhase)
			angle += 2 * math.Pi * (ftrue - 60) * dt
			angle = wrap(angle)
			d := drift.next(r, dt, 120, 0.003)
			pd := pfDrift.next(r, dt, 300, 0.05)
			fm := ftrue + FreqNoise*ns*r.NormFloat64()
			va := wrap(angle + AngleNoise*ns*r.NormFloat64())
			vm := v0*(1+d) + MagNoise*ns*r.NormFloat64()
			ia := wrap(angle - pf - pd + CurrentAngleNoise*ns*r.NormFloat64())
			if r.IntN(10_000) == 0 {
				continue // a lost frame
			}
			ts := stamp(k)
			for i, v := range [ChannelsPerPMU]float64{fm, va, vm, ia} {
				chans[i].Points.AppendFloat(ts, float64(float32(v)))
			}
		}
		out = append(out, chans[:]...)
	}
	return out
}

// smooth is a slow random process: an Ornstein–Uhlenbeck process (mean 0) seen
// through a 2 s low-pass filter, as inertia and load smooth what a PMU measures, so that
// consecutive frames differ by far less than the measurement noise.
type smooth struct{ ou, y float64 }

// next advances the process by dt seconds; tau is the OU time constant and sigma its
// standard deviation.
func (s *smooth) next(r *rand.Rand, dt, tau, sigma float64) float64 {
	s.ou += -s.ou*dt/tau + sigma*math.Sqrt(2*dt/tau)*r.NormFloat64()
	s.y += (s.ou - s.y) * dt / 2
	return s.y
}

// wrap returns a in [−π, π).
func wrap(a float64) float64 {
	return a - 2*math.Pi*math.Floor((a+math.Pi)/(2*math.Pi))
}
